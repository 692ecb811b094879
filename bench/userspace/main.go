package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// inNamespaceEnv marks the re-executed process that runs in the private namespace.
const inNamespaceEnv = "SVCP_BENCH_NETNS"

func main() {
	role := flag.String("role", "", "internal: \"proxier\" runs the proxier child")
	backendsFlag := flag.String("backends", "", "internal: the proxier child's backends")
	duration := flag.Duration("duration", 3*time.Second, "length of each throughput measurement")
	workers := flag.Int("workers", 32, "concurrent connections for connections/s and requests/s")
	streams := flag.Int("streams", 2, "concurrent streams for Gbit/s")
	idle := flag.Int("idle", 10000, "idle proxied connections for the memory measurement")
	flag.Parse()

	var err error
	switch {
	case *role == "proxier":
		err = runProxier(*backendsFlag)
	case os.Getenv(inNamespaceEnv) == "":
		err = reexecInNamespace()
	default:
		err = bench(benchConfig{duration: *duration, workers: *workers, streams: *streams, idle: *idle})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "userspace-bench:", err)
		os.Exit(1)
	}
}

// reexecInNamespace runs this program again under `unshare --net`, in a network
// namespace of its own that disappears when it exits. The file limit is raised
// first (children inherit it): 10,000 proxied connections are 20,000 sockets in
// the proxy and 20,000 in the load generator, plus a splice pipe per direction.
func reexecInNamespace() error {
	if os.Geteuid() != 0 {
		return errors.New("needs root: it makes a network namespace and installs iptables rules in it")
	}
	// Raise the file limit as far as we may (children inherit it): without
	// CAP_SYS_RESOURCE the hard limit stays where it is.
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil {
		want := max(lim.Max, 1<<18)
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: want, Max: want}) != nil {
			lim.Cur = lim.Max
			syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command("unshare", append([]string{"--net", "--", self}, os.Args[1:]...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), inNamespaceEnv+"=1")
	return cmd.Run()
}

// setupNamespace makes the private namespace usable: loopback up, the service
// range routed so the node's packets reach nat OUTPUT (where the portal takes
// them), and enough ephemeral ports for a burst of short connections.
func setupNamespace() error {
	for _, args := range [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "addr", "add", "198.19.0.1/32", "dev", "lo"},
		{"ip", "route", "add", "198.18.0.0/16", "dev", "lo", "src", "198.19.0.1"},
		{"sysctl", "-qw", "net.ipv4.ip_local_port_range=1024 65535"},
		{"sysctl", "-qw", "net.ipv4.tcp_tw_reuse=1"},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

type benchConfig struct {
	duration               time.Duration
	workers, streams, idle int
}

// path is one way to the backends.
type path struct {
	name  string
	addrs func(kind string) []string
	proc  *child // the proxy process; nil for direct
}

func bench(cfg benchConfig) error {
	if err := setupNamespace(); err != nil {
		return err
	}
	// Each idle proxied connection is 2 descriptors in the proxy and 2 here (the
	// client's and the backend's): stay under the file limit.
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil {
		if most := (int(lim.Cur) - 1000) / 2; cfg.idle > most {
			fmt.Printf("note: %d idle connections instead of %d: the file limit is %d (raising it needs CAP_SYS_RESOURCE)\n", most, cfg.idle, lim.Cur)
			cfg.idle = most
		}
	}
	b, err := startBackends()
	if err != nil {
		return err
	}
	defer b.close()
	proxier, err := startProxier(b)
	if err != nil {
		return err
	}
	defer proxier.stop()
	dir, err := os.MkdirTemp("", "svcp-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	haproxy, err := startHAProxy(context.Background(), b, dir, cfg.idle+cfg.workers+100)
	if err != nil {
		return err
	}
	defer haproxy.stop()

	paths := []path{
		{name: "direct", addrs: func(kind string) []string { return b.addrs[kind] }},
		{name: "userspace", proc: proxier, addrs: func(kind string) []string { return []string{vip(kind)} }},
		{name: "haproxy", proc: haproxy, addrs: func(kind string) []string {
			return []string{fmt.Sprintf("127.0.0.1:%d", haproxyPorts[kind])}
		}},
	}
	fmt.Printf("userspace-bench: %s, %d CPUs, GOMAXPROCS %d; %s per measurement, %d workers, %d streams\n\n",
		runtime.Version(), runtime.NumCPU(), runtime.GOMAXPROCS(0), cfg.duration, cfg.workers, cfg.streams)
	fmt.Println("| path | connections/s | requests/s (keep-alive) | Gbit/s | RSS per idle connection |")
	fmt.Println("|---|---:|---:|---:|---:|")
	for _, p := range paths {
		conns := run(p.addrs(kindConn), cfg.workers, cfg.duration, oneConnection)
		time.Sleep(time.Second) // let the TIME_WAIT burst settle between runs
		reqs := run(p.addrs(kindRR), cfg.workers, cfg.duration, requests)
		bulk := run(p.addrs(kindStream), cfg.streams, cfg.duration, stream)
		mem := "-"
		if p.proc != nil {
			perConn, err := idleMemory(p, cfg.idle)
			if err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
			mem = fmt.Sprintf("%.1f KiB", perConn)
		}
		fmt.Printf("| %s | %.0f%s | %.0f%s | %.2f%s | %s |\n", p.name,
			conns.perSecond(), errNote(conns), reqs.perSecond(), errNote(reqs),
			bulk.perSecond()*8/1e9, errNote(bulk), mem)
	}
	fmt.Printf("\nRSS per idle connection: (VmRSS with %d idle proxied connections - VmRSS before) / %d, of the proxy process only; kernel socket and pipe buffers are not in it.\n", cfg.idle, cfg.idle)
	return nil
}

// idleMemory opens n idle connections through p and returns the growth of the
// proxy process's resident memory per connection, in KiB.
func idleMemory(p path, n int) (float64, error) {
	before, err := p.proc.rssKB()
	if err != nil {
		return 0, err
	}
	conns, err := openIdle(p.addrs(kindRR), n)
	if err != nil {
		return 0, err
	}
	defer closeAll(conns)
	after, err := p.proc.rssKB()
	if err != nil {
		return 0, err
	}
	return float64(after-before) / float64(n), nil
}

func errNote(r result) string {
	if r.errors == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d errors)", r.errors)
}
