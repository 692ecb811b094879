// Command pause is the sandbox container of a pod, written in Go: what
// Kubernetes' build/pause/linux/pause.c does, for the image
// registry.k8s.io/pause that package images builds. The C program is the only
// pause in k8s.io/kubernetes (agnhost's "pause" subcommand neither reaps nor
// exits 0), and this repository builds its programs with the go command
// alone, so this is pause.c in Go:
//
//   - it holds the pod's namespaces by staying alive, doing nothing;
//   - SIGINT and SIGTERM end it with status 0 (pause.c's sigdown);
//   - as PID 1 of a pod that shares its process namespace, it reaps the
//     zombies reparented to it (pause.c's sigreap, on SIGCHLD);
//   - -v prints its version and exits.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// version is pause.c's VERSION, printed by -v.
const version = "3.10.2-svcproxy"

func main() {
	for _, a := range os.Args[1:] {
		if strings.EqualFold(a, "-v") {
			fmt.Printf("pause.go %s\n", version)
			return
		}
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	// After Notify, unlike pause.c: the line tells a watcher the handlers
	// are in place.
	if os.Getpid() != 1 {
		// Not an error: pause sees use outside of sandboxes (pause.c).
		fmt.Fprintln(os.Stderr, "Warning: pause should be the first process")
	} else {
		fmt.Fprintln(os.Stderr, "pause: running as PID 1")
	}
	for sig := range sigs {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		fmt.Fprintf(os.Stderr, "Shutting down, got signal: %v\n", sig)
		os.Exit(0)
	}
}

// reap collects every child that has exited; signals coalesce, so one
// SIGCHLD may stand for many.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
