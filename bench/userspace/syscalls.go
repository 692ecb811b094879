package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// syscallCount is one line of `strace -c`: a system call and how many times
// it was made (errors included: a read that says EAGAIN is a call too).
type syscallCount struct {
	name  string
	calls int64
}

// countSyscalls runs the connections/s and requests/s loads through each
// proxy once more, under `strace -c -f` attached to the proxy process, and
// prints the system calls per connection and per request. strace slows the
// proxy down a lot: the rates of these runs mean nothing, only the counts do.
// This stands in for `perf stat`, which has no hardware counters on this VM
// and whose syscall tracepoints count nothing when attached to a running
// process (-p) here.
func countSyscalls(client *namespace, paths []path, cfg benchConfig) error {
	if _, err := exec.LookPath("strace"); err != nil {
		return errors.New("-syscalls needs strace (apt-get install strace)")
	}
	dir, err := os.MkdirTemp("", "svcp-strace-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Println("\nsystem calls of the proxy process (strace -c -f; futex, epoll_wait and nanosleep are the runtime's or the event loop's waiting):")
	for _, row := range []struct {
		name    string
		newConn bool
	}{{"per connection", true}, {"per keep-alive request", false}} {
		for _, p := range paths {
			if p.proc == nil {
				continue
			}
			file := filepath.Join(dir, p.name+".txt")
			counts, requests, err := straceRun(client, p, row.newConn, cfg, file)
			if err != nil {
				return fmt.Errorf("%s, %s: %w", p.name, row.name, err)
			}
			fmt.Printf("- %s, %s: %s\n", p.name, row.name, perRequest(counts, requests))
		}
	}
	return nil
}

// straceRun attaches strace to p's process for one wrk run.
func straceRun(client *namespace, p path, newConn bool, cfg benchConfig, file string) ([]syscallCount, int64, error) {
	st := exec.Command("strace", "-c", "-f", "-o", file, "-p", strconv.Itoa(p.proc.cmd.Process.Pid))
	st.Stderr = nil
	if err := st.Start(); err != nil {
		return nil, 0, err
	}
	time.Sleep(time.Second) // strace attaches to every thread
	res, err := runWrk(client, p.addr(kindHTTP), newConn, cfg)
	st.Process.Signal(syscall.SIGINT)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() { <-ctx.Done(); st.Process.Kill() }()
	werr := st.Wait()
	if err != nil {
		return nil, 0, err
	}
	if werr != nil && !isSignalExit(werr) {
		return nil, 0, fmt.Errorf("strace: %w", werr)
	}
	counts, err := parseStraceSummary(file)
	return counts, res.requests, err
}

func isSignalExit(err error) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee)
}

// parseStraceSummary reads the table `strace -c` writes.
func parseStraceSummary(file string) ([]syscallCount, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var counts []syscallCount
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		// % time, seconds, usecs/call, calls, [errors], syscall
		if len(f) < 5 || f[len(f)-1] == "total" || f[len(f)-1] == "syscall" {
			continue
		}
		calls, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			continue
		}
		counts = append(counts, syscallCount{name: f[len(f)-1], calls: calls})
	}
	if len(counts) == 0 {
		return nil, fmt.Errorf("%s: no strace summary", file)
	}
	return counts, nil
}

// perRequest formats the calls per request, the most frequent first, and
// their total without the waiting calls and with them (every system call
// costs its entry and exit, a few microseconds on this VM, whatever it is
// for).
func perRequest(counts []syscallCount, requests int64) string {
	if requests == 0 {
		return "no requests"
	}
	slices.SortFunc(counts, func(a, b syscallCount) int { return int(b.calls - a.calls) })
	var parts []string
	var moving, all float64
	for _, c := range counts {
		per := float64(c.calls) / float64(requests)
		all += per
		if !waiting[c.name] {
			moving += per
		}
		if per >= 0.05 {
			parts = append(parts, fmt.Sprintf("%s %.1f", c.name, per))
		}
	}
	return fmt.Sprintf("%.1f calls besides waiting, %.1f in all (%s)", moving, all, strings.Join(parts, ", "))
}

// waiting are the calls a process makes to wait or to wake a thread, not to
// move a connection on.
var waiting = map[string]bool{"futex": true, "epoll_wait": true, "epoll_pwait": true, "nanosleep": true, "sched_yield": true}
