package node

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
)

// The kubelet API, as far as the API server uses it for pods/log: the node
// registers a Node object whose address and kubelet port point at a TLS
// server on loopback that answers GET /containerLogs/NS/POD/CONTAINER from
// the container's log file. So kubectl logs, client-go's GetLogs and
// everything else that reads logs through the API server (with its RBAC on
// pods/log) works as in a cluster.
//
// The API server does not verify a kubelet's certificate unless it is given
// a CA for it (--kubelet-certificate-authority), and the local control plane
// gives none: a self-signed certificate made at start is enough.

// logFollowInterval is how often a followed log file is read for new output.
const logFollowInterval = 100 * time.Millisecond

// startKubeletAPI serves the log endpoint until ctx ends and registers the
// Node object that tells the API server where it is.
func (n *Node) startKubeletAPI(ctx context.Context) error {
	cert, err := selfSignedCertificate()
	if err != nil {
		return fmt.Errorf("kubelet API certificate: %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen for the kubelet API: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", n.containerLogs)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	go func() { _ = srv.ServeTLS(l, "", "") }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := n.registerNode(ctx, l.Addr().(*net.TCPAddr).Port); err != nil {
		_ = srv.Close()
		return err
	}
	return nil
}

// registerNode creates (or updates) the Node object with the kubelet API's
// address and port.
func (n *Node) registerNode(ctx context.Context, port int) error {
	nodes := n.client.CoreV1().Nodes()
	_, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.opts.Name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("register node %s: %w", n.opts.Name, err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := nodes.Get(ctx, n.opts.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
		node.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(port)
		node.Status.Capacity = n.opts.Allocatable.DeepCopy()
		node.Status.Allocatable = n.opts.Allocatable.DeepCopy()
		node.Status.Conditions = []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "LocalNodeReady",
			Message: "the local node runs pods as local processes", LastHeartbeatTime: now, LastTransitionTime: now,
		}}
		_, err = nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("report status of node %s: %w", n.opts.Name, err)
	}
	return nil
}

// containerLogs answers the kubelet's log request: tailLines and limitBytes
// cut the output, follow streams it until the pod stops running on this
// node. timestamps, sinceSeconds, sinceTime and previous are not supported
// (the log file keeps neither times nor earlier runs apart) and are ignored.
func (n *Node) containerLogs(w http.ResponseWriter, r *http.Request) {
	ns, podName, container := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	q := r.URL.Query()
	follow := q.Get("follow") == "true"
	tail, limit := int64(-1), int64(-1)
	for key, dst := range map[string]*int64{"tailLines": &tail, "limitBytes": &limit} {
		if v := q.Get(key); v != "" {
			i, err := strconv.ParseInt(v, 10, 64)
			if err != nil || i < 0 {
				http.Error(w, fmt.Sprintf("%s must be a non-negative number, not %q", key, v), http.StatusBadRequest)
				return
			}
			*dst = i
		}
	}
	pod, err := n.client.CoreV1().Pods(ns).Get(r.Context(), podName, metav1.GetOptions{})
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	f, err := os.Open(n.LogPath(ns, podName, container))
	if errors.Is(err, os.ErrNotExist) {
		http.Error(w, fmt.Sprintf("container %q in pod %q is waiting to start", container, podName), http.StatusBadRequest)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer f.Close()

	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	out := io.Writer(w)
	if limit >= 0 {
		out = &limitWriter{w: w, left: limit}
	}
	data, err := io.ReadAll(f)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if tail >= 0 {
		data = lastLines(data, tail)
	}
	if _, err := out.Write(data); err != nil || !follow {
		return
	}
	flusher, _ := w.(http.Flusher)
	tick := time.NewTicker(logFollowInterval)
	defer tick.Stop()
	for {
		if flusher != nil {
			flusher.Flush()
		}
		// Read what the container wrote; once the pod no longer runs here,
		// what the file holds is all there will be.
		running := n.isRunning(pod.UID)
		more, err := io.Copy(out, f)
		if err != nil || (!running && more == 0) {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
	}
}

func (n *Node) isRunning(uid types.UID) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, ok := n.running[uid]
	return ok
}

// lastLines keeps the last n lines of data.
func lastLines(data []byte, n int64) []byte {
	if n == 0 {
		return nil
	}
	var starts []int
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), len(data)+1)
	sc.Split(scanLinesKeepEnds)
	pos := 0
	for sc.Scan() {
		starts = append(starts, pos)
		pos += len(sc.Bytes())
	}
	if int64(len(starts)) <= n {
		return data
	}
	return data[starts[int64(len(starts))-n]:]
}

// scanLinesKeepEnds splits like bufio.ScanLines but keeps the line endings,
// so offsets add up.
func scanLinesKeepEnds(data []byte, atEOF bool) (int, []byte, error) {
	if atEOF && len(data) == 0 {
		return 0, nil, nil
	}
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return i + 1, data[:i+1], nil
	}
	if atEOF {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// limitWriter writes at most left bytes and then reports io.EOF.
type limitWriter struct {
	w    io.Writer
	left int64
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, io.EOF
	}
	cut := false
	if int64(len(p)) > l.left {
		p, cut = p[:l.left], true
	}
	n, err := l.w.Write(p)
	l.left -= int64(n)
	if err == nil && cut {
		err = io.EOF
	}
	return n, err
}

// selfSignedCertificate makes a certificate for 127.0.0.1, valid for a year.
func selfSignedCertificate() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "petri-local-node"},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
