// Command testapp is the container of local/realnode's tests, run from an
// image built in the test.
//
//	testapp serve DIR   writes DIR/ready, serves GET / (what the container
//	                    sees of itself) and GET /ready (200 once DIR/ready
//	                    is there) on :8080
//	testapp fetch URL   gets URL until it answers (60 s at most), then the
//	                    API server's /api in-cluster (the kubernetes Service,
//	                    the ServiceAccount's token and CA), and writes the
//	                    body and "api=<status>" to /dev/termination-log
package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: testapp serve DIR | fetch URL")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		serve(os.Args[2])
	case "fetch":
		fetch(os.Args[2])
	default:
		os.Exit(2)
	}
}

func serve(dir string) {
	host, _ := os.Hostname()
	if err := os.WriteFile(filepath.Join(dir, "ready"), []byte(host), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rootfs := "read-only"
	if err := os.WriteFile("/probe", nil, 0o644); err == nil {
		rootfs = "writable"
	}
	http.HandleFunc("/ready", func(w http.ResponseWriter, _ *http.Request) {
		if _, err := os.Stat(filepath.Join(dir, "ready")); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
	})
	http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "host=%s uid=%d rootfs=%s\n", host, os.Getuid(), rootfs)
	})
	fmt.Fprintln(os.Stderr, http.ListenAndServe(":8080", nil))
	os.Exit(1)
}

func fetch(url string) {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := client.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				_ = os.WriteFile("/dev/termination-log", append(body, []byte("api="+inCluster()+"\n")...), 0o644)
				return
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		if time.Now().After(deadline) {
			_ = os.WriteFile("/dev/termination-log", []byte(err.Error()), 0o644)
			os.Exit(1)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// inCluster calls the API server as in-cluster clients do and returns the
// status, or the error.
func inCluster() string {
	const sa = "/var/run/secrets/kubernetes.io/serviceaccount/"
	ca, err := os.ReadFile(sa + "ca.crt")
	if err != nil {
		return err.Error()
	}
	token, err := os.ReadFile(sa + "token")
	if err != nil {
		return err.Error()
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, _ := http.NewRequest(http.MethodGet, "https://kubernetes.default.svc/api", nil)
	req.Header.Set("Authorization", "Bearer "+string(token))
	resp, err := client.Do(req)
	if err != nil {
		return err.Error()
	}
	_ = resp.Body.Close()
	return resp.Status
}
