// Command petri-testhelper plays a container image in tests: the local node
// runs it for pods whose image maps to it, and its subcommands do what the
// test needs a container to do.
//
//	succeed                         print a line and exit 0
//	fail CODE MESSAGE               write MESSAGE to the termination log, exit CODE
//	block                           run until killed
//	on-sigterm exit|ignore          say when SIGTERM arrives; then exit 0, or
//	                                ignore it and run until SIGKILL
//	create-configmap NS NAME        create a ConfigMap as the pod's identity; on
//	                                refusal write the error to the termination log
//	record FILE                     write the process environment to FILE
//	wait-file FILE                  run until FILE exists, then exit 0
//	serve [--listen=:8080] [--ready-file=FILE]
//	                                answer "pod NAME" on every path; /healthz
//	                                fails until FILE exists (when given)
//	fetch URL                       GET URL (through HTTP_PROXY) and write the
//	                                answer to the termination log
//
// Every subcommand accepts --termination-log=PATH (default /dev/termination-log).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
)

func main() {
	fs := flag.NewFlagSet("petri-testhelper", flag.ExitOnError)
	termLog := fs.String("termination-log", "/dev/termination-log", "file the termination message is written to")
	listen := fs.String("listen", ":8080", "serve: listen address")
	readyFile := fs.String("ready-file", "", "serve: /healthz fails until this file exists")
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: petri-testhelper SUBCOMMAND [ARGS]")
		os.Exit(2)
	}
	sub := os.Args[1]
	_ = fs.Parse(os.Args[2:])
	args := fs.Args()
	terminate := func(code int, msg string) {
		_ = os.WriteFile(*termLog, []byte(msg), 0o644)
		fmt.Println(msg)
		os.Exit(code)
	}
	switch sub {
	case "succeed":
		fmt.Println("succeeded as pod", os.Getenv("HOSTNAME"))
	case "fail":
		if len(args) != 2 {
			terminate(2, "usage: fail CODE MESSAGE")
		}
		code, err := strconv.Atoi(args[0])
		if err != nil {
			terminate(2, "CODE must be a number")
		}
		terminate(code, args[1])
	case "block":
		fmt.Println("blocking until killed")
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
		<-ch
		os.Exit(143)
	case "on-sigterm":
		// on-sigterm exit|ignore: says what SIGTERM did, then exits 0 or
		// goes on until SIGKILL.
		if len(args) != 1 || args[0] != "exit" && args[0] != "ignore" {
			terminate(2, "usage: on-sigterm exit|ignore")
		}
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		fmt.Println("waiting for SIGTERM")
		for range ch {
			if args[0] == "exit" {
				fmt.Println("SIGTERM received: stopping")
				os.Exit(0)
			}
			fmt.Println("SIGTERM received: ignored")
		}
	case "create-configmap":
		if len(args) != 2 {
			terminate(2, "usage: create-configmap NAMESPACE NAME")
		}
		cfg, err := config.GetConfig()
		if err != nil {
			terminate(3, "load kubeconfig: "+err.Error())
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			terminate(3, err.Error())
		}
		_, err = cs.CoreV1().ConfigMaps(args[0]).Create(context.Background(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: args[1]},
		}, metav1.CreateOptions{})
		if err != nil {
			terminate(1, err.Error())
		}
		fmt.Println("created configmap", args[0]+"/"+args[1])
	case "record":
		if len(args) != 1 {
			terminate(2, "usage: record FILE")
		}
		env := os.Environ()
		sort.Strings(env)
		if err := os.WriteFile(args[0], []byte(strings.Join(env, "\n")+"\n"), 0o644); err != nil {
			terminate(1, err.Error())
		}
	case "wait-file":
		if len(args) != 1 {
			terminate(2, "usage: wait-file FILE")
		}
		fmt.Println("waiting for", args[0])
		for {
			if _, err := os.Stat(args[0]); err == nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	case "serve":
		mux := http.NewServeMux()
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
			if *readyFile != "" {
				if _, err := os.Stat(*readyFile); err != nil {
					http.Error(w, "not ready", http.StatusServiceUnavailable)
					return
				}
			}
			fmt.Fprintln(w, "ok")
		})
		mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "pod %s path %s host %s\n", os.Getenv("HOSTNAME"), r.URL.Path, r.Host)
		})
		fmt.Println("serving on", *listen)
		if err := http.ListenAndServe(*listen, mux); err != nil {
			terminate(1, err.Error())
		}
	case "fetch":
		if len(args) != 1 {
			terminate(2, "usage: fetch URL")
		}
		resp, err := http.Get(args[0])
		if err != nil {
			terminate(1, err.Error())
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			terminate(1, fmt.Sprintf("HTTP %d: %s", resp.StatusCode, body))
		}
		terminate(0, strings.TrimSpace(string(body)))
	default:
		terminate(2, "unknown subcommand "+sub)
	}
}
