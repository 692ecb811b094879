package main

import (
	"cmp"
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

// TestStartup is a tool, not a test: with STARTUP=BINARY[,BINARY...] it
// starts each clusterdns binary in turn on each source of SOURCES, RUNS times
// (default 3), alternating, and prints for each run how long it took from
// exec until the last Service answers ("ready", as TestCompareCoreDNS
// measures it), the CPU time the process used until then (utime + stime) and
// its RSS then. The CPU time is what the machine's load does not stretch.
// SOURCES is "api" (the default), "file" or "api,file": "api" needs
// APISERVER=KUBECONFIG, an API server kept filled by TestHoldAPIServer with
// SERVICES Services; "file" writes the benchmark's manifests file of SERVICES
// Services and starts clusterdns --services on it:
//
//	STARTUP=/tmp/clusterdns.base,bin/clusterdns APISERVER=/tmp/kapi-20000/kubeconfig SERVICES=20000 SOURCES=api,file \
//	    flock /tmp/svcproxy-bench.lock go test -run TestStartup -v ./bench/dns
//
// LOAD=DURATION also runs dnsperf for that long once ready (the benchmark's
// query file, at full speed) and prints its QPS and the RSS after it.
//
// PROFILE=DIR also writes a CPU profile of each run to DIR (clusterdns
// --profiling), of its first 10 seconds from exec (PROFILE_SECONDS): once
// ready, an idle clusterdns uses next to no CPU.
func TestStartup(t *testing.T) {
	bins := os.Getenv("STARTUP")
	if bins == "" {
		t.Skip("a tool: STARTUP=BINARY[,...] SOURCES=api,file APISERVER=KUBECONFIG SERVICES=N (see the doc comment)")
	}
	n, err := strconv.Atoi(cmp.Or(os.Getenv("SERVICES"), "20000"))
	if err != nil || n <= 0 {
		t.Fatalf("SERVICES %q: not a positive number", os.Getenv("SERVICES"))
	}
	runs, err := strconv.Atoi(cmp.Or(os.Getenv("RUNS"), "3"))
	if err != nil || runs <= 0 {
		t.Fatalf("RUNS %q: not a positive number", os.Getenv("RUNS"))
	}
	var load time.Duration
	if l := os.Getenv("LOAD"); l != "" {
		if load, err = time.ParseDuration(l); err != nil || load < time.Second {
			t.Fatalf("LOAD %q: not a duration of a second or more", l)
		}
	}
	dir := t.TempDir()
	// The flags that name each source.
	var sources [][2]string
	for src := range strings.SplitSeq(cmp.Or(os.Getenv("SOURCES"), "api"), ",") {
		switch src {
		case "api":
			kubeconfig := os.Getenv("APISERVER")
			if kubeconfig == "" {
				t.Fatal("SOURCES api: needs APISERVER=KUBECONFIG")
			}
			sources = append(sources, [2]string{"--kubeconfig", kubeconfig})
		case "file":
			manifest := filepath.Join(dir, fmt.Sprintf("services-%d.json", n))
			if err := writeManifests(manifest, n); err != nil {
				t.Fatal(err)
			}
			sources = append(sources, [2]string{"--services", manifest})
		default:
			t.Fatalf("SOURCES: %q is neither api nor file", src)
		}
	}
	profiles := os.Getenv("PROFILE")
	// The last Service written is the last one answered, as in
	// TestCompareCoreDNS's query files.
	name, ns := svcName(n - 1)
	last := filepath.Join(dir, "last.txt")
	if err := os.WriteFile(last, []byte(name+"."+ns+".svc.cluster.local A\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	queries := filepath.Join(dir, "cluster.txt")
	if err := writeQueries(queries, filepath.Join(dir, "nxdomain.txt"), n); err != nil {
		t.Fatal(err)
	}
	loadavg := func() string {
		l, _ := os.ReadFile("/proc/loadavg")
		return strings.Join(strings.Fields(string(l))[:3], " ")
	}
	fmt.Printf("%s, load average %s\n", time.Now().UTC().Format(time.DateTime), loadavg())
	fmt.Println("| run | binary | source | ready after | CPU to ready | RSS at ready | QPS under LOAD | RSS after |")
	fmt.Println("|---:|---|---|---:|---:|---:|---:|---:|")
	for run := 1; run <= runs; run++ {
		for j, src := range sources {
			for i, bin := range strings.Split(bins, ",") {
				s := startOnce(t, bin, src, last, queries, load, profiles, fmt.Sprintf("%d-%d-%d", run, j, i))
				fmt.Printf("| %d | %s | %s | %s | %s | %.1f MiB | %s | %s |\n", run, bin, strings.TrimPrefix(src[0], "--"),
					s.ready.Round(10*time.Millisecond), s.cpu.Round(10*time.Millisecond), float64(s.rss)/1024, s.qps, s.rssAfter)
			}
		}
	}
	fmt.Printf("%s, load average %s\n", time.Now().UTC().Format(time.DateTime), loadavg())
}

// started is what startOnce measured.
type started struct {
	ready, cpu    time.Duration // from exec until the last Service answers; CPU time until then
	rss           int64         // kB, at ready
	qps, rssAfter string        // under LOAD and after it; "-" without LOAD
}

// startOnce starts bin on source (its flag and value), waits until it answers
// for the Service in last, and measures the start; with load > 0 it then runs
// dnsperf on queries for that long.
func startOnce(t *testing.T, bin string, source [2]string, last, queries string, load time.Duration, profiles, tag string) started {
	t.Helper()
	ports := freePorts(t, 2)
	metrics := ""
	if profiles != "" {
		metrics = "127.0.0.1:" + strconv.Itoa(ports[1])
	}
	cmd := exec.Command(bin, source[0], source[1], "--listen", "127.0.0.1:"+strconv.Itoa(ports[0]),
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
		url := "http://" + metrics + "/debug/pprof/profile?seconds=" + cmp.Or(os.Getenv("PROFILE_SECONDS"), "10")
		go func() { prof <- fetchProfile(ctx, url, filepath.Join(profiles, "cpu-"+tag+".pprof")) }()
	}
	if err := waitAnswers(ctx, "127.0.0.1:"+strconv.Itoa(ports[0]), last, 5*time.Minute); err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	s := started{ready: time.Since(began), qps: "-", rssAfter: "-"}
	s.cpu, s.rss = procCPU(t, cmd.Process.Pid)
	if load > 0 {
		b := &bench{duration: load, clients: 10, outstanding: 100}
		r, err := b.dnsperf(strconv.Itoa(ports[0]), queries, 0)
		if err != nil {
			t.Fatalf("%s: %v", bin, err)
		}
		_, rss := procCPU(t, cmd.Process.Pid)
		s.qps, s.rssAfter = fmt.Sprintf("%.0f", r.qps), fmt.Sprintf("%.1f MiB", float64(rss)/1024)
	}
	if prof != nil {
		if err := <-prof; err != nil {
			t.Errorf("profile: %v", err)
		}
	}
	return s
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
