// Package deployer drives the Helm v3 SDK for one component of an
// environment. It is the body of petri-deployer, the program that runs as the
// container of the Jobs the operator creates: the operator never talks to Helm
// itself, so a slow or crashing chart operation costs a pod, not the operator.
//
// The pieces are small on purpose: NewActionConfig builds Helm's
// action.Configuration, LoadChart fetches a chart from one of three source
// kinds, ChooseAction picks install, upgrade or unlock-then-upgrade from the
// release's stored state, Deploy and Undeploy run the thin Helm wrappers, and
// Classify turns any error into one of the Reasons the operator understands.
package deployer
