package docscheck

// Allowed are words that the rules read as Petri's but that belong to
// another tool, by kind, each with the reason it is not Petri's. Keep it
// short: a word belongs here only when no rule can tell it apart.
var Allowed = map[string]map[string]string{
	KindFlag: {
		"--server-side":                          "kubectl apply's flag",
		"-k":                                     "kubectl apply's flag",
		"-f":                                     "kubectl's and helm's flag",
		"-n":                                     "kubectl's namespace flag (kubectl petri has it too)",
		"-trimpath":                              "go build's flag",
		"--skip-crds":                            "helm install's flag",
		"--set":                                  "helm's flag",
		"--wait":                                 "helm's and kubectl petri's flag",
		"--root-dir":                             "kubelet's flag",
		"--service-account-max-token-expiration": "kube-apiserver's flag",
		"--kubelet-preferred-address-types":      "metrics-server's flag",
		"--cert-dir":                             "controller-runtime webhook server's and kube-apiserver's flag",
		"--kube-api-qps":                         "kube-controller-manager's flag",
		"--kube-api-burst":                       "kube-controller-manager's flag",
		"--duration":                             "kubectl create token's flag",
	},
	KindReason: {
		"CrashLoopBackOff":  "the kubelet's waiting reason",
		"ImagePullBackOff":  "the kubelet's waiting reason",
		"ErrImagePull":      "the kubelet's waiting reason",
		"InvalidImageName":  "the kubelet's waiting reason",
		"ContainerCreating": "the kubelet's waiting reason",
		"PodFailurePolicy":  "the Job controller's Failed reason",
		"InProgress":        "a kstatus status (integrations.md), not a condition reason",
	},
	KindConfig: {
		"repository.url": "a field of a GitHub webhook's payload",
	},
	KindCRDField: {
		"spec.wait":         "a Flux Kustomization's field",
		"spec.healthChecks": "a Flux Kustomization's field",
	},
}
