package controllers

// RequestKind is requestKind, for the table test.
var RequestKind = requestKind

// Cache slimming and the pod index, for their unit tests.
var (
	SlimCachedJob  = slimCachedJob
	SlimCachedPod  = slimCachedPod
	JobPods        = jobPods
	IndexJobPods   = indexJobPods
	IndexPodsByJob = indexPodsByJob
)

// SetFinalizer is setFinalizer, for its test against the API server.
var SetFinalizer = setFinalizer
