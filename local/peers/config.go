package peers

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"
)

// Setup is what both systems are configured from: one repository's pull
// requests carrying a label, each deployed from the same chart of the same
// chart repository with the same values. The application's pods request
// 1m of CPU (the chart's default is 10m): the one node has two cores to
// place by requests, and 100 pull requests on each system are 200 pods.
type Setup struct {
	// Repository is the pull requests' GitHub repository, owner/name.
	Repository string
	// Label is the label a pull request carries to get an environment.
	Label string
	// ChartRepository is the Helm repository's URL (index.yaml), Chart and
	// ChartVersion the chart in it.
	ChartRepository string
	Chart           string
	ChartVersion    string
	// APIURL is the GitHub API's base URL Argo CD's generator is given (it
	// adds api/v3/ itself to a host that is not api.github.com), and
	// SyncAPIURL the one Petri's sync is given (with /api/v3/).
	APIURL     string
	SyncAPIURL string
	// RequeueAfterSeconds is how often Argo CD's generator lists the pull
	// requests without a webhook.
	RequeueAfterSeconds int
	// Cluster is the API server's URL, Argo CD's destination: its
	// in-cluster address (kubernetes.default.svc) is reached only from a
	// pod, so the cluster is declared by a cluster Secret with this URL.
	Cluster string
}

// Names both systems' objects follow.
const (
	// ArgoCDNamespace is where Argo CD's components, Applications and
	// ApplicationSet live (install.yaml's namespace).
	ArgoCDNamespace = "argocd"
	// AppName is the application in both systems' configuration.
	AppName = "hello"
	// ApplicationSetName is Argo CD's ApplicationSet.
	ApplicationSetName = "hello-previews"
	// TokenSecret holds the GitHub token Argo CD's generator reads.
	TokenSecret = "github-token"
	// tokenKey is the key of the token in TokenSecret.
	tokenKey = "token"
)

// ApplicationName is the Argo CD Application of a pull request, as the
// ApplicationSet's template names it.
func ApplicationName(number int) string { return fmt.Sprintf("%s-pr-%d", AppName, number) }

// ArgoCDNamespaceOf is the namespace Argo CD deploys a pull request into.
func ArgoCDNamespaceOf(number int) string { return fmt.Sprintf("argocd-%s-pr-%d", AppName, number) }

// ApplicationSetYAML is Argo CD's ApplicationSet for pull-request previews
// as its documentation recommends them: the pullRequest generator of
// GitHub (label filter, token Secret, long requeue since webhooks refresh
// it), one Application per pull request named from its number, in a
// namespace of its own created by the sync, the chart at the same version
// with the pull request's head commit in its values, automated sync with
// prune and self-heal, and the resources finalizer so that a closed pull
// request's resources are deleted with its Application.
func ApplicationSetYAML(s Setup) string {
	owner, repo, _ := strings.Cut(s.Repository, "/")
	return fmt.Sprintf(`apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata:
  name: %[1]s
  namespace: %[2]s
spec:
  goTemplate: true
  goTemplateOptions: ["missingkey=error"]
  generators:
    - pullRequest:
        github:
          owner: %[3]s
          repo: %[4]s
          api: %[5]s
          tokenRef:
            secretName: %[6]s
            key: %[7]s
          labels:
            - %[8]s
        requeueAfterSeconds: %[9]d
  template:
    metadata:
      name: '%[10]s-pr-{{ .number }}'
      finalizers:
        - resources-finalizer.argocd.argoproj.io
    spec:
      project: default
      source:
        repoURL: %[11]s
        chart: %[12]s
        targetRevision: %[13]s
        helm:
          releaseName: web
          valuesObject:
            message: 'Hello from pull request #{{ .number }}'
            commit: '{{ .head_sha }}'
            resources:
              requests:
                cpu: 1m
                memory: 16Mi
      destination:
        server: %[14]s
        namespace: 'argocd-%[10]s-pr-{{ .number }}'
      syncPolicy:
        automated:
          prune: true
          selfHeal: true
        syncOptions:
          - CreateNamespace=true
`, ApplicationSetName, ArgoCDNamespace, owner, repo, s.APIURL, TokenSecret, tokenKey, s.Label,
		s.RequeueAfterSeconds, AppName, s.ChartRepository, s.Chart, s.ChartVersion, s.Cluster)
}

// ClusterSecretYAML declares the cluster to Argo CD (a Secret of type
// cluster) at its URL, with the application controller's ServiceAccount
// token and the API server's CA.
func ClusterSecretYAML(server, token string, caData []byte) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata:
  name: cluster-local
  namespace: %s
  labels:
    argocd.argoproj.io/secret-type: cluster
stringData:
  name: local
  server: %s
  config: '{"bearerToken": %q, "tlsClientConfig": {"insecure": false, "caData": %q}}'
`, ArgoCDNamespace, server, token, base64.StdEncoding.EncodeToString(caData))
}

// PetriApplicationYAML is Petri's config repository file of the same
// application: the same repository, label, chart and values.
func PetriApplicationYAML(s Setup) string {
	return fmt.Sprintf(`apiVersion: petri.dev/v1alpha1
kind: Application
name: %[1]s
repository: %[2]s
trigger:
  labels: [%[3]s]
components:
  - name: web
    chart:
      repository: %[4]s
      name: %[5]s
      version: %[6]s
    values:
      resources:
        requests:
          cpu: 1m
          memory: 16Mi
    pullRequestValues:
      message: "Hello from pull request #{{ .Number }}"
      commit: "{{ .SHA }}"
ttl: 24h
`, AppName, s.Repository, s.Label, s.ChartRepository, s.Chart, s.ChartVersion)
}

// ArgoCDSettingsYAML is what Argo CD reads besides its flags: argocd-cm and
// argocd-cmd-params-cm as install.yaml ships them (empty: every default),
// the default AppProject the API server would create (any source, any
// destination), argocd-secret with the GitHub webhook secret (and the
// server key its settings insist on), and the
// generator's token Secret. Documents show it with placeholders for both
// values.
func ArgoCDSettingsYAML(webhookSecret, token, serverKey string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata:
  name: argocd-cm
  namespace: %[1]s
  labels:
    app.kubernetes.io/name: argocd-cm
    app.kubernetes.io/part-of: argocd
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: argocd-cmd-params-cm
  namespace: %[1]s
  labels:
    app.kubernetes.io/name: argocd-cmd-params-cm
    app.kubernetes.io/part-of: argocd
---
apiVersion: v1
kind: Secret
metadata:
  name: argocd-secret
  namespace: %[1]s
  labels:
    app.kubernetes.io/name: argocd-secret
    app.kubernetes.io/part-of: argocd
stringData:
  webhook.github.secret: %[2]q
  server.secretkey: %[6]q
---
apiVersion: v1
kind: Secret
metadata:
  name: %[3]s
  namespace: %[1]s
stringData:
  %[4]s: %[5]q
---
apiVersion: argoproj.io/v1alpha1
kind: AppProject
metadata:
  name: default
  namespace: %[1]s
spec:
  sourceRepos: ["*"]
  destinations:
    - server: "*"
      namespace: "*"
  clusterResourceWhitelist:
    - group: "*"
      kind: "*"
`, ArgoCDNamespace, webhookSecret, TokenSecret, tokenKey, token, serverKey)
}

// installKinds are the kinds taken from Argo CD's install.yaml: its
// components' identities and rights. Its ConfigMaps and Secrets come from
// ArgoCDSettingsYAML, its Deployments are processes here.
var installKinds = map[string]bool{"ServiceAccount": true, "Role": true, "ClusterRole": true, "RoleBinding": true, "ClusterRoleBinding": true}

// installComponents are the components that run.
var installComponents = []string{"argocd-application-controller", "argocd-applicationset-controller", "argocd-repo-server"}

// InstallRBAC picks from install.yaml the ServiceAccounts, Roles,
// ClusterRoles and their bindings of the components that run, in the
// namespace install.yaml is applied to (kubectl apply -n argocd).
func InstallRBAC(install []byte) ([]byte, error) {
	var out bytes.Buffer
	for _, doc := range bytes.Split(install, []byte("\n---")) {
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return nil, fmt.Errorf("install.yaml: %w", err)
		}
		kind, _ := obj["kind"].(string)
		meta, _ := obj["metadata"].(map[string]any)
		if !installKinds[kind] || meta == nil {
			continue
		}
		name, _ := meta["name"].(string)
		if !component(name) {
			continue
		}
		if kind != "ClusterRole" && kind != "ClusterRoleBinding" {
			meta["namespace"] = ArgoCDNamespace
		}
		data, err := yaml.Marshal(obj)
		if err != nil {
			return nil, err
		}
		out.WriteString("---\n")
		out.Write(data)
	}
	if out.Len() == 0 {
		return nil, fmt.Errorf("install.yaml has none of the components' ServiceAccounts and RBAC")
	}
	return out.Bytes(), nil
}

func component(name string) bool {
	for _, c := range installComponents {
		if name == c {
			return true
		}
	}
	return false
}

// Flow schemas that tell the systems' requests apart in kube-apiserver's
// own metrics (apiserver_flowcontrol_dispatched_requests_total by
// flow_schema): Petri's operator and sync match Petri's own FlowSchemas
// (config/flowcontrol), its deployer identities (ServiceAccounts of the
// management namespace) and Argo CD's components (ServiceAccounts of its
// namespace) one each of these, at the priority level every
// ServiceAccount's requests have without them (workload-low), just before
// the suggested configuration's service-accounts FlowSchema (9000).
const (
	FlowSchemaPetriDeployers = "peers-petri-deployers"
	FlowSchemaArgoCD         = "peers-argocd"
)

// PetriFlowSchemas are the flow schemas whose requests are Petri's.
var PetriFlowSchemas = []string{"petri-leader-election", "petri-controllers", FlowSchemaPetriDeployers}

// ArgoCDFlowSchemas are the flow schemas whose requests are Argo CD's.
var ArgoCDFlowSchemas = []string{FlowSchemaArgoCD}

// FlowSchemasYAML is the measurement's two FlowSchemas.
func FlowSchemasYAML(petriNamespace string) string {
	schema := func(name string, precedence int, namespace string) string {
		return fmt.Sprintf(`apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata:
  name: %s
spec:
  matchingPrecedence: %d
  priorityLevelConfiguration:
    name: workload-low
  distinguisherMethod:
    type: ByUser
  rules:
    - subjects:
        - kind: Group
          group:
            name: system:serviceaccounts:%s
      resourceRules:
        - apiGroups: ["*"]
          resources: ["*"]
          verbs: ["*"]
          clusterScope: true
          namespaces: ["*"]
      nonResourceRules:
        - nonResourceURLs: ["*"]
          verbs: ["*"]
`, name, precedence, namespace)
	}
	return schema(FlowSchemaPetriDeployers, 8990, petriNamespace) + "---\n" + schema(FlowSchemaArgoCD, 8991, ArgoCDNamespace)
}
