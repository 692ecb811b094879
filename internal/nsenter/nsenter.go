// Package nsenter runs a function inside a network namespace, on one OS
// thread, and brings that thread back afterwards.
//
// A network namespace belongs to a thread, not to a process: setns(2) moves
// only the calling thread. A Go goroutine must therefore lock itself to its
// thread (runtime.LockOSThread) before entering, or the scheduler would move
// it, and other goroutines onto the namespaced thread, at any time.
//
// The thread must also come back. A locked goroutine that exits without
// unlocking takes its thread with it, except when that thread is the
// process's main thread, which Go cannot end: the runtime parks it for good,
// still inside the namespace. /proc/PID/ns/net names the main thread's
// namespace, so the whole process then looks as if it lived in the
// namespace, and a tool that stops "every process in the namespace" (as the
// lab's `svclab down` does) stops itself. Run therefore returns the thread to
// the namespace it came from and unlocks it; only if that fails is the thread
// left locked, to end with its goroutine.
package nsenter

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Run calls fn on an OS thread that has entered the network namespace at
// path (a file such as /run/netns/NAME or /proc/PID/ns/net). Sockets fn
// creates stay in that namespace after Run returns and can be used from any
// goroutine; processes fn starts with os/exec are forked from this thread and
// start in the namespace too.
func Run(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		restored := false
		defer func() {
			if restored {
				runtime.UnlockOSThread()
			}
			// Otherwise the thread stays locked and ends with this goroutine.
		}()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("open this thread's namespace: %w", err)
			return
		}
		defer unix.Close(orig)
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			restored = true // never left
			errc <- fmt.Errorf("open namespace %s: %w", path, err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			restored = true
			errc <- fmt.Errorf("enter namespace %s: %w", path, err)
			return
		}
		err = fn()
		restored = unix.Setns(orig, unix.CLONE_NEWNET) == nil
		errc <- err
	}()
	return <-errc
}
