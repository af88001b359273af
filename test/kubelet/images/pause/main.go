// The pod sandbox's first process, as the kubelet's runtime starts it in every pod: it holds
// the pod's namespaces open, reaps the zombies of processes that share its PID namespace, and
// exits 0 on SIGINT or SIGTERM. Written here (the pause image cannot be pulled); it behaves as
// Kubernetes' own pause does (build/pause in kubernetes/kubernetes): `-v` prints the version.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// version is stamped at build time (scripts/lib/kubelet-images.sh).
var version = "dev"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Printf("pause (pve-nfs-csi test image) %s\n", version)
		return
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "Warning: pause should be the first process")
	}
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range signals {
		if s == syscall.SIGCHLD {
			reap()
			continue
		}
		fmt.Fprintf(os.Stderr, "Shutting down, got signal: %v\n", s)
		os.Exit(0)
	}
}

// reap collects every exited child: signals coalesce, so one SIGCHLD may stand for many.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
