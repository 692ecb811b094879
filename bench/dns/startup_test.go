package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStartup is a tool, not a test: with STARTUP=BINARY[,BINARY...] and
// APISERVER=KUBECONFIG (an API server kept filled by TestHoldAPIServer, with
// SERVICES Services) it starts each clusterdns binary in turn, RUNS times
// (default 3), alternating, and prints for each run how long it took from
// exec until the last Service answers ("ready", as TestCompareCoreDNS
// measures it) and the CPU time the process used until then (utime + stime).
// The CPU time is what the machine's load does not stretch:
//
//	STARTUP=/tmp/clusterdns.base,bin/clusterdns APISERVER=/tmp/kapi-20000/kubeconfig SERVICES=20000 \
//	    flock /tmp/svcproxy-bench.lock go test -run TestStartup -v ./bench/dns
//
// PROFILE=DIR also writes a CPU profile of each run to DIR (clusterdns
// --profiling), of its first 10 seconds from exec (PROFILE_SECONDS): once
// ready, an idle clusterdns uses next to no CPU.
func TestStartup(t *testing.T) {
	bins, kubeconfig := os.Getenv("STARTUP"), os.Getenv("APISERVER")
	if bins == "" || kubeconfig == "" {
		t.Skip("a tool: STARTUP=BINARY[,...] APISERVER=KUBECONFIG SERVICES=N (see the doc comment)")
	}
	n, err := strconv.Atoi(cmpOr(os.Getenv("SERVICES"), "20000"))
	if err != nil || n <= 0 {
		t.Fatalf("SERVICES %q: not a positive number", os.Getenv("SERVICES"))
	}
	runs, err := strconv.Atoi(cmpOr(os.Getenv("RUNS"), "3"))
	if err != nil || runs <= 0 {
		t.Fatalf("RUNS %q: not a positive number", os.Getenv("RUNS"))
	}
	profiles := os.Getenv("PROFILE")
	// The last Service written is the last one answered, as in
	// TestCompareCoreDNS's query files.
	name, ns := svcName(n - 1)
	last := filepath.Join(t.TempDir(), "last.txt")
	if err := os.WriteFile(last, []byte(name+"."+ns+".svc.cluster.local A\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	load := func() string {
		l, _ := os.ReadFile("/proc/loadavg")
		return strings.Join(strings.Fields(string(l))[:3], " ")
	}
	fmt.Printf("%s, load average %s\n", time.Now().UTC().Format(time.DateTime), load())
	fmt.Println("| run | binary | ready after | CPU to ready | RSS at ready |")
	fmt.Println("|---:|---|---:|---:|---:|")
	for run := 1; run <= runs; run++ {
		for i, bin := range strings.Split(bins, ",") {
			ready, cpu, rss := startOnce(t, bin, kubeconfig, last, profiles, fmt.Sprintf("%d-%d", run, i))
			fmt.Printf("| %d | %s | %s | %s | %.1f MiB |\n", run, bin, ready.Round(10*time.Millisecond), cpu.Round(10*time.Millisecond), float64(rss)/1024)
		}
	}
	fmt.Printf("%s, load average %s\n", time.Now().UTC().Format(time.DateTime), load())
}

// startOnce starts bin on the API server, waits until it answers for the
// Service in queries, and returns that time, the CPU time the process used
// until then and its RSS (kB).
func startOnce(t *testing.T, bin, kubeconfig, queries, profiles, tag string) (ready, cpu time.Duration, rss int64) {
	t.Helper()
	ports := freePorts(t, 2)
	metrics := ""
	if profiles != "" {
		metrics = "127.0.0.1:" + strconv.Itoa(ports[1])
	}
	cmd := exec.Command(bin, "--kubeconfig", kubeconfig, "--listen", "127.0.0.1:"+strconv.Itoa(ports[0]),
		"--upstream", "127.0.0.1:9", "--metrics-bind-address", metrics, "--profiling="+strconv.FormatBool(profiles != ""), "-v", "warn")
	cmd.Stderr = os.Stderr
	began := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Waiting for answers ends when the process does.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
		cancel()
	}()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-exited
	}()
	var prof chan error
	if profiles != "" {
		// From exec: ask until the metrics port answers; the request ends
		// with the process at the latest.
		prof = make(chan error, 1)
		url := "http://" + metrics + "/debug/pprof/profile?seconds=" + cmpOr(os.Getenv("PROFILE_SECONDS"), "10")
		go func() { prof <- fetchProfile(ctx, url, filepath.Join(profiles, "cpu-"+tag+".pprof")) }()
	}
	if err := waitAnswers(ctx, "127.0.0.1:"+strconv.Itoa(ports[0]), queries, 5*time.Minute); err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	ready = time.Since(began)
	cpu, rss = procCPU(t, cmd.Process.Pid)
	if prof != nil {
		if err := <-prof; err != nil {
			t.Errorf("profile: %v", err)
		}
	}
	return ready, cpu, rss
}

// fetchProfile saves the CPU profile at url to file, retrying while the
// server is not up yet, until ctx ends.
func fetchProfile(ctx context.Context, url, file string) error {
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			time.Sleep(5 * time.Millisecond)
			continue
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return os.WriteFile(file, data, 0o644)
	}
}

// procCPU reads the CPU time (utime + stime) and VmRSS (kB) of a process.
func procCPU(t *testing.T, pid int) (time.Duration, int64) {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the command name, which is in parentheses: utime and
	// stime are fields 14 and 15 of the line, in clock ticks (USER_HZ, 100).
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	rss, _, err := memory(pid)
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, rss
}
