package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/svcproxy/svcproxy/bench/report"
)

// inNamespaceEnv marks the re-executed process that runs in the private namespace.
const inNamespaceEnv = "SVCP_BENCH_NETNS"

func main() {
	// The children (the proxier, HAProxy) die with the thread that started them
	// (Pdeathsig), and the client namespace's helpers lock threads and retire
	// them: start children from the main thread only, which lives as long as
	// the process.
	runtime.LockOSThread()
	role := flag.String("role", "", "internal: \"proxier\" runs the proxier child")
	backendsFlag := flag.String("backends", "", "internal: the proxier child's backends")
	udpIdle := flag.Duration("udp-idle", 5*time.Second, "the proxier's UDP idle timeout (long enough to hold the sessions whose memory is measured)")
	duration := flag.Duration("duration", 5*time.Second, "length of each throughput measurement")
	connections := flag.Int("connections", 32, "wrk's concurrent connections")
	idle := flag.Int("idle", 10000, "idle proxied connections for the memory measurement")
	udpSessions := flag.Int("udp-sessions", 20000, "UDP sessions for the memory measurement")
	udpRate := flag.Int("udp-rate", 4000, "new UDP sessions per second for the receive-buffer measurement")
	syscalls := flag.Bool("syscalls", false, "also count each proxy's system calls per connection and per request with strace -c (slow)")
	udp := flag.Bool("udp", true, "measure the UDP rows too (false: the TCP table only, a quicker run while iterating)")
	tcp := flag.Bool("tcp", true, "measure the TCP rows (false: the UDP table only)")
	profile := flag.String("profile", "", "write CPU, block and allocation profiles and execution traces of the proxier child's connections/s and requests/s rows to this `DIR`")
	proxierProcs := flag.Int("proxier-procs", 0, "the proxier child's GOMAXPROCS (0: the runtime's default, one per CPU)")
	haproxyThreads := flag.Int("haproxy-threads", 2, "HAProxy's nbthread")
	jsonFile := flag.String("json", "", "also write the TCP table's figures and ratios, the date and the load as JSON to this `FILE` (bench/plot draws them)")
	flag.Parse()

	var err error
	switch {
	case *role == "proxier":
		if *profile != "" {
			// The allocation profile samples one allocation per 4 KiB
			// instead of per 512 KiB: enough samples in a 5 s run.
			runtime.MemProfileRate = 4096
		}
		err = runProxier(*backendsFlag, *udpIdle)
	case os.Getenv(inNamespaceEnv) == "":
		err = reexecInNamespace()
	default:
		err = bench(benchConfig{duration: *duration, connections: *connections, idle: *idle,
			udpSessions: *udpSessions, udpRate: *udpRate, udpIdle: *udpIdle, udp: *udp, tcp: *tcp, syscalls: *syscalls, profile: *profile,
			proxierProcs: *proxierProcs, haproxyThreads: *haproxyThreads, json: *jsonFile})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "userspace-bench:", err)
		os.Exit(1)
	}
}

// reexecInNamespace runs this program again under `unshare --net`, in a network
// namespace of its own (the node) that disappears when it exits. The file limit
// is raised first, as far as we may (children inherit it).
func reexecInNamespace() error {
	if os.Geteuid() != 0 {
		return errors.New("needs root: it makes network namespaces and installs iptables rules in them")
	}
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

// setupNode makes the node namespace usable: loopback up, and enough ephemeral
// ports for a burst of short connections to the backends.
func setupNode() error {
	for _, args := range [][]string{
		{"ip", "link", "set", "lo", "up"},
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
	duration             time.Duration
	connections, idle    int
	udpSessions, udpRate int
	udpIdle              time.Duration
	udp, tcp             bool
	syscalls             bool
	profile              string
	proxierProcs         int // the proxier child's GOMAXPROCS; 0: the default
	haproxyThreads       int
	json                 string // -json: where the report goes; "": none
}

// path is one way to the backends.
type path struct {
	name string
	addr func(kind string) string
	proc *child // the proxy process; nil for direct
	// noIdle skips the memory measurement: another row measures the
	// same process
	noIdle bool
}

// tcpRow is one path's TCP figures.
type tcpRow struct {
	conns, reqs wrkResult
	stream      streamResult
	kibPerIdle  float64 // 0: not measured
}

func bench(cfg benchConfig) error {
	if err := setupNode(); err != nil {
		return err
	}
	client, err := newClientNamespace()
	if err != nil {
		return err
	}
	defer client.remove()
	// Each idle proxied connection is 2 descriptors in the proxy and 2 here (the
	// client's and the backend's): stay under the file limit.
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil {
		if most := (int(lim.Cur) - 1000) / 2; cfg.idle > most {
			fmt.Printf("note: %d idle connections instead of %d: the file limit is %d (raising it needs CAP_SYS_RESOURCE)\n", most, cfg.idle, lim.Cur)
			cfg.idle = most
		}
		// Each UDP session is 1 descriptor here and 1 in the proxy, which keeps
		// a reserve of 2% (at most 512) for the rest of the process.
		if most := int(lim.Cur) - min(int(lim.Cur)/50, 512) - 200; cfg.udpSessions > most {
			fmt.Printf("note: %d UDP sessions instead of %d: the file limit is %d\n", most, cfg.udpSessions, lim.Cur)
			cfg.udpSessions = most
		}
	}
	b, err := startBackends()
	if err != nil {
		return err
	}
	defer b.close()
	proxier, err := startProxier(b, cfg.udpIdle, cfg.profile, cfg.proxierProcs)
	if err != nil {
		return err
	}
	defer proxier.stop()
	dir, err := os.MkdirTemp("", "svcp-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	haproxy, err := startHAProxy(context.Background(), b, dir, cfg.idle+cfg.connections+100, cfg.haproxyThreads)
	if err != nil {
		return err
	}
	defer haproxy.stop()
	if err := redirectToHAProxy(context.Background()); err != nil {
		return err
	}

	paths := []path{
		{name: "direct", addr: func(kind string) string { return b.addrs[kind][0] }},
		{name: "userspace", proc: proxier, addr: vip},
		{name: "haproxy", proc: haproxy, addr: func(kind string) string {
			return fmt.Sprintf("%s:%d", backendIP, haproxyPorts[kind])
		}},
		// The same HAProxy, reached as the userspace proxy is: through a
		// REDIRECT from a virtual address. Its idle memory is the row above's.
		{name: "haproxy-redirect", proc: haproxy, addr: haproxyVIP, noIdle: true},
	}
	procs := "default"
	if cfg.proxierProcs > 0 {
		procs = fmt.Sprint(cfg.proxierProcs)
	}
	fmt.Printf("userspace-bench: %s, %d CPUs, GOMAXPROCS %d (proxier child: %s), HAProxy nbthread %d; %s per measurement; wrk -t2 -c%d from a client namespace\n",
		runtime.Version(), runtime.NumCPU(), runtime.GOMAXPROCS(0), procs, cfg.haproxyThreads, cfg.duration, cfg.connections)
	loadBefore := report.LoadAvg()
	fmt.Printf("load average before: %s; a system call that does nothing (getppid) takes %.2f µs here\n\n", loadBefore, syscallCost())
	var rows map[string]tcpRow
	if cfg.tcp {
		rows = map[string]tcpRow{}
		for _, p := range paths {
			row, err := measureTCP(client, p, cfg)
			if err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
			rows[p.name] = row
		}
		printTCP(paths, rows, cfg)
		if cfg.syscalls {
			if err := countSyscalls(client, paths, cfg); err != nil {
				return err
			}
		}
	}
	if cfg.udp {
		if err := benchUDP(client, b, proxier, cfg); err != nil {
			return err
		}
	}
	fmt.Printf("\nload average after: %s\n", report.LoadAvg())
	if cfg.json != "" && cfg.tcp {
		if err := writeReport(cfg.json, newReport(paths, rows), loadBefore); err != nil {
			return err
		}
	}
	if cfg.profile != "" && cfg.tcp {
		return profileRows(client, proxier, cfg)
	}
	return nil
}

// measureTCP takes one path's TCP row.
func measureTCP(client *namespace, p path, cfg benchConfig) (tcpRow, error) {
	var row tcpRow
	var err error
	if row.conns, err = measureWrk(client, p, true, cfg); err != nil {
		return row, err
	}
	time.Sleep(time.Second) // let the TIME_WAIT burst settle between runs
	if row.reqs, err = measureWrk(client, p, false, cfg); err != nil {
		return row, err
	}
	if row.stream, err = oneStream(client, p, cfg.duration); err != nil {
		return row, err
	}
	if p.proc != nil && !p.noIdle {
		if row.kibPerIdle, err = idleMemory(client, p, cfg.idle); err != nil {
			return row, err
		}
	}
	return row, nil
}

// measureWrk runs wrk through p and, for a proxy, reads the CPU time the
// proxy process used meanwhile.
func measureWrk(client *namespace, p path, newConn bool, cfg benchConfig) (wrkResult, error) {
	var userBefore, sysBefore float64
	var before0 switches
	if p.proc != nil {
		var err error
		if userBefore, sysBefore, err = p.proc.cpuTimes(); err != nil {
			return wrkResult{}, err
		}
		if before0, err = p.proc.contextSwitches(); err != nil {
			return wrkResult{}, err
		}
	}
	var objects, bytes uint64
	if p.proc != nil && p.proc.pprof != "" {
		var err error
		if objects, bytes, err = p.proc.allocs(); err != nil {
			return wrkResult{}, err
		}
	}
	cl0, node0, err := bothCounters(client)
	if err != nil {
		return wrkResult{}, err
	}
	res, err := runWrk(client, p.addr(kindHTTP), newConn, cfg)
	if err != nil {
		return res, err
	}
	cl1, node1, err := bothCounters(client)
	if err != nil {
		return res, err
	}
	res.trouble = tcpTrouble(cl0, node0, cl1, node1)
	if p.proc == nil {
		return res, nil
	}
	userAfter, sysAfter, err := p.proc.cpuTimes()
	res.cpu = userAfter + sysAfter - userBefore - sysBefore
	res.cpuSystem = sysAfter - sysBefore
	if err == nil {
		var n switches
		n, err = p.proc.contextSwitches()
		res.switches = n.sub(before0)
	}
	if err == nil && p.proc.pprof != "" {
		var o, b uint64
		o, b, err = p.proc.allocs()
		res.allocs, res.allocBytes = o-objects, b-bytes
	}
	return res, err
}

func printTCP(paths []path, rows map[string]tcpRow, cfg benchConfig) {
	d, h, hr := rows["direct"], rows["haproxy"], rows["haproxy-redirect"]
	fmt.Println("| path | connections/s | requests/s (keep-alive) | Gbit/s (one stream) | RSS per idle connection |")
	fmt.Println("|---|---:|---:|---:|---:|")
	for _, p := range paths {
		r := rows[p.name]
		mem := "-"
		if r.kibPerIdle != 0 {
			mem = fmt.Sprintf("%.1f KiB", r.kibPerIdle)
		}
		fmt.Printf("| %s | %.0f%s | %.0f%s | %.2f | %s |\n", p.name,
			r.conns.perSecond, errNote(r.conns), r.reqs.perSecond, errNote(r.reqs), r.stream.gbits, mem)
	}
	u := rows["userspace"]
	fmt.Printf("\nuserspace / haproxy: connections/s %.2f×, requests/s %.2f×, RSS per idle connection %.2f×\n",
		u.conns.perSecond/h.conns.perSecond, u.reqs.perSecond/h.reqs.perSecond, u.kibPerIdle/h.kibPerIdle)
	fmt.Printf("userspace / direct:  connections/s %.2f×, requests/s %.2f×, Gbit/s %.2f×\n",
		u.conns.perSecond/d.conns.perSecond, u.reqs.perSecond/d.reqs.perSecond, u.stream.gbits/d.stream.gbits)
	fmt.Printf("haproxy-redirect / haproxy (what the REDIRECT costs HAProxy): connections/s %.2f×, requests/s %.2f×, Gbit/s %.2f×\n",
		hr.conns.perSecond/h.conns.perSecond, hr.reqs.perSecond/h.reqs.perSecond, hr.stream.gbits/h.stream.gbits)
	fmt.Printf("userspace / haproxy-redirect (both behind a REDIRECT): connections/s %.2f×, requests/s %.2f×, Gbit/s %.2f×\n",
		u.conns.perSecond/hr.conns.perSecond, u.reqs.perSecond/hr.reqs.perSecond, u.stream.gbits/hr.stream.gbits)
	fmt.Printf("proxy CPU per connection: userspace %s, haproxy %s (%.2f×), haproxy-redirect %s (%.2f×)\n",
		cpuSplit(u.conns), cpuSplit(h.conns), u.conns.cpuPerRequest()/h.conns.cpuPerRequest(),
		cpuSplit(hr.conns), u.conns.cpuPerRequest()/hr.conns.cpuPerRequest())
	fmt.Printf("proxy CPU per keep-alive request: userspace %s, haproxy %s (%.2f×), haproxy-redirect %s (%.2f×)\n",
		cpuSplit(u.reqs), cpuSplit(h.reqs), u.reqs.cpuPerRequest()/h.reqs.cpuPerRequest(),
		cpuSplit(hr.reqs), u.reqs.cpuPerRequest()/hr.reqs.cpuPerRequest())
	fmt.Printf("proxy threads' context switches (voluntary + non-voluntary) per connection: userspace %s, haproxy %s; per keep-alive request: userspace %s, haproxy %s\n",
		switchesPer(u.conns), switchesPer(h.conns), switchesPer(u.reqs), switchesPer(h.reqs))
	fmt.Println("where the machine's time went, µs per connection / per keep-alive request (the proxy's CPU, wrk's, the backends', the kernel's softirq work not charged to a process, idle CPU, and steal: CPU time the hypervisor gave to other guests):")
	for _, p := range paths {
		r := rows[p.name]
		fmt.Printf("  %-16s  %s / %s\n", p.name, timeShares(r.conns), timeShares(r.reqs))
	}
	trouble := false
	for _, p := range paths {
		r := rows[p.name]
		for _, run := range []struct {
			name string
			r    wrkResult
		}{{"connections/s", r.conns}, {"requests/s", r.reqs}} {
			if run.r.trouble != "" {
				fmt.Printf("TCP retransmits or drops in %s's %s run: %s (a SYN sent again, a timeout or a PAWS drop costs its connection a second or more)\n", p.name, run.name, run.r.trouble)
				trouble = true
			}
		}
	}
	if !trouble {
		fmt.Println("TCP retransmits or drops in the wrk runs (SYNs sent again, timeouts, PAWS, accept queue): none")
	}
	fmt.Println("one stream, ms per GB moved (the proxy's CPU, this process's: the backend that writes and the reader; softirq; idle CPU; steal):")
	for _, p := range paths {
		s := rows[p.name].stream
		fmt.Printf("  %-16s  proxy %.0f, backend and reader %.0f, softirq %.0f, idle %.0f, steal %.0f\n", p.name,
			s.perGB(s.proxyCPU), s.perGB(s.self), s.perGB(s.softirq), s.perGB(s.idle), s.perGB(s.steal))
	}
	fmt.Printf("userspace heap allocations per connection: %.1f (%.0f bytes); per keep-alive request: %.2f (%.0f bytes)\n",
		perRequestOf(u.conns.allocs, u.conns), perRequestOf(u.conns.allocBytes, u.conns),
		perRequestOf(u.reqs.allocs, u.reqs), perRequestOf(u.reqs.allocBytes, u.reqs))
	fmt.Printf("RSS per idle connection: (VmRSS with %d idle proxied connections - VmRSS before) / %d, of the proxy process only; kernel socket buffers are not in it.\n", cfg.idle, cfg.idle)
}

// cpuSplit is the proxy's CPU per request of r, in µs, and the part of it
// spent in the kernel.
func cpuSplit(r wrkResult) string {
	return fmt.Sprintf("%.1f µs (system %.1f)", r.cpuPerRequest(), r.perRequest(r.cpuSystem))
}

// timeShares is where the machine's time went per request of r.
func timeShares(r wrkResult) string {
	return fmt.Sprintf("proxy %.1f, wrk %.1f, backends %.1f, softirq %.1f, idle %.1f, steal %.1f",
		r.perRequest(r.cpu), r.perRequest(r.wrkCPU), r.perRequest(r.backendCPU), r.perRequest(r.softirq), r.perRequest(r.idle), r.perRequest(r.steal))
}

// switchesPer is r's context switches per request: voluntary + non-voluntary.
func switchesPer(r wrkResult) string {
	return fmt.Sprintf("%.2f + %.2f", perRequestOf(r.switches.voluntary, r), perRequestOf(r.switches.nonvoluntary, r))
}

// perRequestOf is n per request of r.
func perRequestOf(n uint64, r wrkResult) float64 {
	if r.requests == 0 {
		return 0
	}
	return float64(n) / float64(r.requests)
}

// benchUDP measures the UDP path against direct: datagrams/s on 32 sessions,
// new sessions/s, a paced rate of new sessions (replies lost, receive-buffer
// drops in the node), and the proxy's cost per session: its CPU time per
// exchange and per new session, and its memory per open session.
func benchUDP(client *namespace, b *backends, proxier *child, cfg benchConfig) error {
	type udpRow struct {
		datagrams, sessions, paced udpResult
		drops                      uint64
		cpuDatagrams, cpuSessions  float64 // the proxy's CPU seconds during the two runs
	}
	rows := map[string]udpRow{}
	names := []string{"direct", "userspace"}
	addr := map[string]string{"direct": b.addrs[kindUDP][0], "userspace": vip(kindUDP)}
	for _, name := range names {
		var r udpRow
		var proc *child
		if name == "userspace" {
			proc = proxier
		}
		var err error
		r.cpuDatagrams, err = cpuDuring(proc, func() (err error) {
			r.datagrams, err = udpDatagrams(client, addr[name], 32, cfg.duration)
			return err
		})
		if err != nil {
			return fmt.Errorf("UDP datagrams/s, %s: %w", name, err)
		}
		time.Sleep(cfg.udpIdle + cfg.udpIdle/4 + time.Second) // the sessions idle out
		r.cpuSessions, err = cpuDuring(proc, func() (err error) {
			r.sessions, err = udpSessions(client, addr[name], 32, cfg.duration)
			// The sessions' end is part of their cost: wait for it.
			time.Sleep(cfg.udpIdle + cfg.udpIdle/4 + time.Second)
			return err
		})
		if err != nil {
			return fmt.Errorf("UDP sessions/s, %s: %w", name, err)
		}
		before, err := udpReceiveErrors()
		if err != nil {
			return err
		}
		if r.paced, err = udpPaced(client, addr[name], cfg.udpRate, 3*time.Second); err != nil {
			return fmt.Errorf("UDP at %d sessions/s, %s: %w", cfg.udpRate, name, err)
		}
		after, _ := udpReceiveErrors()
		r.drops = after - before
		time.Sleep(cfg.udpIdle + cfg.udpIdle/4 + time.Second)
		rows[name] = r
	}
	heapBefore, err := proxier.heapBytes()
	if err != nil {
		return err
	}
	before, err := proxier.rssKB()
	if err != nil {
		return err
	}
	start := time.Now()
	conns, err := openUDPSessions(client, vip(kindUDP), cfg.udpSessions)
	if err != nil {
		return err
	}
	opening := time.Since(start)
	open, serr := proxier.udpSessions()
	heapAfter, herr := proxier.heapBytes()
	after, err := proxier.rssKB()
	closeAll(conns)
	if err := errors.Join(err, serr, herr); err != nil {
		return err
	}
	fmt.Printf("\n| UDP path | datagrams/s (32 sessions) | new sessions/s | %d new sessions/s for 3s: replies lost | receive-buffer drops |\n", cfg.udpRate)
	fmt.Println("|---|---:|---:|---:|---:|")
	for _, name := range names {
		r := rows[name]
		fmt.Printf("| %s | %.0f | %.0f | %d of %d | %d |\n", name, r.datagrams.perSecond(), r.sessions.perSecond(),
			r.paced.lost, r.paced.ops+r.paced.lost, r.drops)
	}
	d, u := rows["direct"], rows["userspace"]
	fmt.Printf("\nuserspace / direct: datagrams/s %.2f×, new sessions/s %.2f×\n",
		u.datagrams.perSecond()/d.datagrams.perSecond(), u.sessions.perSecond()/d.sessions.perSecond())
	fmt.Printf("proxy CPU per exchange (a datagram and its reply) on an open session: %.1f µs; per new session (opened, one exchange, idled out and ended): %.0f µs\n",
		perOp(u.cpuDatagrams, u.datagrams.ops), perOp(u.cpuSessions, u.sessions.ops))
	if open > 0 {
		fmt.Printf("UDP memory: %d sessions opened in %.1fs, %d of them still open in the proxy: RSS +%.1f MiB, %.2f KiB per open session (%.1f MiB for 20,000); live Go heap +%.0f bytes per open session\n",
			cfg.udpSessions, opening.Seconds(), open, float64(after-before)/1024,
			float64(after-before)/float64(open), float64(after-before)/float64(open)*20000/1024,
			(float64(heapAfter)-float64(heapBefore))/float64(open))
	} else {
		fmt.Printf("UDP memory: %d sessions opened in %.1fs, none still open in the proxy (raise -udp-idle)\n", cfg.udpSessions, opening.Seconds())
	}
	return nil
}

// cpuDuring runs f and returns the CPU seconds proc used meanwhile (0 when
// proc is nil: the direct path has no proxy).
func cpuDuring(proc *child, f func() error) (float64, error) {
	if proc == nil {
		return 0, f()
	}
	before, err := proc.cpuSeconds()
	if err != nil {
		return 0, err
	}
	if err := f(); err != nil {
		return 0, err
	}
	after, err := proc.cpuSeconds()
	return after - before, err
}

// perOp is seconds per op, in microseconds.
func perOp(seconds float64, ops uint64) float64 {
	if ops == 0 {
		return 0
	}
	return seconds / float64(ops) * 1e6
}

// idleMemory opens n idle connections through p and returns the growth of the
// proxy process's resident memory per connection, in KiB.
func idleMemory(client *namespace, p path, n int) (float64, error) {
	before, err := p.proc.rssKB()
	if err != nil {
		return 0, err
	}
	conns, err := openIdle(client, p.addr(kindHTTP), n)
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

// profileRows runs the userspace connections/s and requests/s rows again,
// once each under the CPU profiler, the block profiler, the allocation
// profiler (what was allocated during the run) and the execution tracer (go
// tool trace: goroutine and P transitions, system calls), then the one stream
// under the CPU profiler and the tracer, and writes the profiles and traces of
// the proxier child to cfg.profile.
func profileRows(client *namespace, proxier *child, cfg benchConfig) error {
	if err := os.MkdirAll(cfg.profile, 0o755); err != nil {
		return err
	}
	for _, row := range []struct {
		name    string
		newConn bool
	}{{"conns", true}, {"reqs", false}} {
		for _, kind := range []string{"profile", "block", "allocs", "trace"} {
			file := filepath.Join(cfg.profile, row.name+"-"+map[string]string{"profile": "cpu.pprof", "block": "block.pprof", "allocs": "allocs.pprof", "trace": "trace.out"}[kind])
			wait := proxier.profile(kind, cfg.duration, file)
			res, err := runWrk(client, vip(kindHTTP), row.newConn, cfg)
			if err := errors.Join(err, wait()); err != nil {
				return err
			}
			fmt.Printf("profile %s: %s (%.0f/s during it)\n", row.name, file, res.perSecond)
		}
	}
	stream := path{name: "userspace", proc: proxier, addr: vip}
	for _, run := range []struct{ kind, file string }{{"profile", "stream-cpu.pprof"}, {"trace", "stream-trace.out"}} {
		file := filepath.Join(cfg.profile, run.file)
		wait := proxier.profile(run.kind, cfg.duration, file)
		res, err := oneStream(client, stream, cfg.duration)
		if err := errors.Join(err, wait()); err != nil {
			return err
		}
		fmt.Printf("profile stream: %s (%.2f Gbit/s during it)\n", file, res.gbits)
	}
	return nil
}

// syscallCost is the time of a system call that does nothing, in
// microseconds: the entry and exit every call pays, which a VM can make
// several times dearer than on the bare machine. Multiplied by the calls per
// connection it is the part of the proxies' CPU that system calls cost
// before they do any work.
// The least of five batches: other load only ever adds.
func syscallCost() float64 {
	const n = 20000
	best := time.Duration(1<<63 - 1)
	for range 5 {
		start := time.Now()
		for range n {
			syscall.RawSyscall(syscall.SYS_GETPPID, 0, 0, 0)
		}
		best = min(best, time.Since(start))
	}
	return best.Seconds() / n * 1e6
}

func errNote(r wrkResult) string {
	if r.errors == "" {
		return ""
	}
	return " (" + r.errors + ")"
}
