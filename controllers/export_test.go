package controllers

// RequestKind is requestKind, for the table test.
var RequestKind = requestKind
