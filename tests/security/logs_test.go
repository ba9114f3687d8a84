package security_test

import (
	"context"

	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// clientsetAs is a typed client impersonating the identity, for requests the
// controller-runtime client does not make (pods/log, pods/exec).
func clientsetAs(id identity) (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(cluster.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: serviceaccount.MakeUsername(id.namespace, id.name),
		Groups:   append(serviceaccount.MakeGroupNames(id.namespace), "system:authenticated"),
	}
	return kubernetes.NewForConfig(cfg)
}

// readPodLog reads a pod's log (pods/log) as the identity; a 404 for the
// absent pod means the request was authorized.
func readPodLog(id identity, namespace string) func(context.Context, client.Client) error {
	return func(ctx context.Context, _ client.Client) error {
		cs, err := clientsetAs(id)
		if err != nil {
			return err
		}
		return cs.CoreV1().RESTClient().Get().Namespace(namespace).Resource("pods").Name("absent").SubResource("log").Do(ctx).Error()
	}
}

// execInPod asks to exec into a pod (pods/exec) as the identity.
func execInPod(id identity, namespace string) func(context.Context, client.Client) error {
	return func(ctx context.Context, _ client.Client) error {
		cs, err := clientsetAs(id)
		if err != nil {
			return err
		}
		return cs.CoreV1().RESTClient().Post().Namespace(namespace).Resource("pods").Name("absent").SubResource("exec").
			Param("container", "main").Param("command", "sh").Do(ctx).Error()
	}
}
