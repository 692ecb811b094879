package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	_ "net/http/pprof"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/service"
	"github.com/svcproxy/svcproxy/userspace"
)

// vip is the ClusterIP:port of the benchmark Service of a kind.
func vip(kind string) string {
	return map[string]string{kindHTTP: "198.18.0.1:80", kindStream: "198.18.0.2:80", kindUDP: "198.18.0.3:53"}[kind]
}

// runProxier is the child process: a userspace.Proxier with its portals, serving
// one Service per kind, until SIGTERM. It prints "ready" once synced, and the
// address of its pprof server (net/http/pprof) on loopback.
func runProxier(backendFlag string, udpIdle time.Duration) error {
	ipt, err := iptables.New(iptables.Config{})
	if err != nil {
		return err
	}
	p := userspace.NewProxier(userspace.Config{IPTables: ipt, UDPIdleTimeout: udpIdle})
	var svcs []*service.Service
	for _, kindAddrs := range strings.Split(backendFlag, ";") {
		kind, addrs, _ := strings.Cut(kindAddrs, "=")
		svcs = append(svcs, benchService(kind, strings.Split(addrs, ",")))
	}
	if err := p.Sync(service.NewSnapshot(svcs, nil)); err != nil {
		return err
	}
	runtime.SetBlockProfileRate(int(time.Microsecond)) // what the block profile samples
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return err
	}
	// /free returns unused memory to the kernel first, so that RSS readings
	// compare what is in use, not what the garbage collector has not yet
	// given back.
	http.HandleFunc("/free", func(http.ResponseWriter, *http.Request) { debug.FreeOSMemory() })
	// /udp-sessions is the number of open UDP sessions: what the memory per
	// session is divided by (sessions idle out while they are being opened).
	http.HandleFunc("/udp-sessions", func(w http.ResponseWriter, _ *http.Request) {
		var n uint64
		for name, c := range p.Stats() {
			if name.Protocol == service.UDP {
				n += c.ConnectionsActive
			}
		}
		fmt.Fprint(w, n)
	})
	// /allocs is the heap allocations so far, objects and bytes: exact
	// counts, which the bench divides by connections and requests.
	http.HandleFunc("/allocs", func(w http.ResponseWriter, _ *http.Request) {
		m := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}, {Name: "/gc/heap/allocs:bytes"}}
		metrics.Read(m)
		fmt.Fprintf(w, "%d %d", m[0].Value.Uint64(), m[1].Value.Uint64())
	})
	// /heap is the bytes of live heap objects, after a collection: what the
	// bench divides by the UDP sessions open.
	http.HandleFunc("/heap", func(w http.ResponseWriter, _ *http.Request) {
		runtime.GC()
		m := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		metrics.Read(m)
		fmt.Fprint(w, m[0].Value.Uint64())
	})
	go http.Serve(ln, nil) // net/http/pprof's handlers, /free, /udp-sessions, /allocs and /heap
	fmt.Printf("ready %s\n", ln.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return p.Run(ctx)
}

func benchService(kind string, addrs []string) *service.Service {
	vip := netip.MustParseAddrPort(vip(kind))
	proto := service.TCP
	if kind == kindUDP {
		proto = service.UDP
	}
	svc := &service.Service{
		NamespacedName: service.NamespacedName{Namespace: "bench", Name: kind},
		Type:           service.TypeClusterIP,
		ClusterIPs:     []netip.Addr{vip.Addr()},
	}
	port := &service.Port{
		Name:     service.PortName{NamespacedName: svc.NamespacedName, Protocol: proto},
		Service:  svc,
		Port:     vip.Port(),
		Protocol: proto,
	}
	for _, a := range addrs {
		port.Endpoints = append(port.Endpoints, service.Endpoint{Addr: netip.MustParseAddrPort(a), Ready: true, Serving: true})
	}
	svc.Ports = []*service.Port{port}
	return svc
}

// child is a proxy process the benchmark started.
type child struct {
	name  string
	cmd   *exec.Cmd
	pprof string // the proxier child's pprof address
}

func (c *child) stop() {
	c.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go waitExit(c.cmd, done)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		c.cmd.Process.Kill()
		<-done
	}
}

// waitExit reaps cmd and closes done.
func waitExit(cmd *exec.Cmd, done chan<- struct{}) {
	cmd.Wait()
	close(done)
}

// rssKB is the resident memory of the child, from /proc/PID/status (for the
// proxier child, after it returned its unused memory to the kernel).
func (c *child) rssKB() (int, error) {
	if c.pprof != "" {
		if resp, err := http.Get("http://" + c.pprof + "/free"); err == nil {
			resp.Body.Close()
		}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			return strconv.Atoi(f[1])
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", c.cmd.Process.Pid)
}

// udpSessions is the number of UDP sessions the proxier child holds open.
func (c *child) udpSessions() (int, error) {
	resp, err := http.Get("http://" + c.pprof + "/udp-sessions")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(string(b))
}

// heapBytes is the bytes of the proxier child's live heap objects.
func (c *child) heapBytes() (uint64, error) {
	resp, err := http.Get("http://" + c.pprof + "/heap")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var n uint64
	_, err = fmt.Fscan(resp.Body, &n)
	return n, err
}

// allocs is the heap allocations of the proxier child so far: objects and
// bytes.
func (c *child) allocs() (objects, bytes uint64, err error) {
	resp, err := http.Get("http://" + c.pprof + "/allocs")
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	_, err = fmt.Fscan(resp.Body, &objects, &bytes)
	return objects, bytes, err
}

// cpuSeconds is the CPU time (user and system, all threads) the child has
// used so far, from /proc/PID/stat.
func (c *child) cpuSeconds() (float64, error) {
	user, system, err := c.cpuTimes()
	return user + system, err
}

// cpuTimes is the child's CPU time so far, all threads, split into user time
// (its own code) and system time (the kernel's work in its system calls),
// from /proc/PID/stat.
func (c *child) cpuTimes() (user, system float64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.cmd.Process.Pid))
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces: count
	// the fields after its closing parenthesis. utime and stime are fields 14
	// and 15, in clock ticks (USER_HZ, 100 on Linux).
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: unexpected format", c.cmd.Process.Pid)
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, err
	}
	return float64(utime) / clockTicks, float64(stime) / clockTicks, nil
}

// contextSwitches is how often the child's threads have left the CPU so far
// (voluntary_ctxt_switches and nonvoluntary_ctxt_switches of
// /proc/PID/task/*/status, summed): each one a trip through the kernel's
// scheduler, dear on a VM. A voluntary switch is a thread that waits (in
// epoll_wait, a futex: the proxy's own doing); a non-voluntary one a thread
// the kernel took the CPU from (other load's doing, mostly). A thread that
// has ended is no longer counted.
func (c *child) contextSwitches() (switches, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", c.cmd.Process.Pid))
	if err != nil || len(tasks) == 0 {
		return switches{}, fmt.Errorf("no threads of %d: %v", c.cmd.Process.Pid, err)
	}
	var n switches
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // the thread ended meanwhile
		}
		for _, line := range strings.Split(string(b), "\n") {
			name, v, _ := strings.Cut(line, ":")
			k, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			switch name {
			case "voluntary_ctxt_switches":
				n.voluntary += k
			case "nonvoluntary_ctxt_switches":
				n.nonvoluntary += k
			}
		}
	}
	return n, nil
}

// switches counts context switches.
type switches struct{ voluntary, nonvoluntary uint64 }

func (s switches) sub(t switches) switches {
	return switches{s.voluntary - t.voluntary, s.nonvoluntary - t.nonvoluntary}
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// startProxier runs this program again as the proxier child.
// procs > 0 sets its GOMAXPROCS.
func startProxier(b *backends, udpIdle time.Duration, profile string, procs int) (*child, error) {
	var spec []string
	for _, kind := range append(tcpKinds, kindUDP) {
		spec = append(spec, kind+"="+strings.Join(b.addrs[kind], ","))
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "-role=proxier", "-backends="+strings.Join(spec, ";"), "-udp-idle="+udpIdle.String(), "-profile="+profile)
	cmd.Stderr = os.Stderr
	if procs > 0 {
		cmd.Env = append(os.Environ(), fmt.Sprintf("GOMAXPROCS=%d", procs))
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{name: "userspace", cmd: cmd}
	line, err := bufio.NewReader(out).ReadString('\n')
	if _, serr := fmt.Sscanf(line, "ready %s", &c.pprof); err != nil || serr != nil {
		c.stop()
		return nil, fmt.Errorf("proxier child: %q, %v", line, err)
	}
	return c, nil
}

// profile fetches a profile (pprof's name: "profile" for CPU, "block", "allocs") of the
// proxier child over d into file, while the caller runs load.
func (c *child) profile(name string, d time.Duration, file string) func() error {
	done := make(chan error, 1)
	go func() {
		// With seconds, the block and allocs profiles are what happened during them.
		url := fmt.Sprintf("http://%s/debug/pprof/%s?seconds=%d", c.pprof, name, int(d.Seconds()))
		resp, err := http.Get(url)
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(file)
		if err != nil {
			done <- err
			return
		}
		_, err = io.Copy(f, resp.Body)
		done <- errors.Join(err, f.Close())
	}()
	return func() error { return <-done }
}

// haproxyPorts are HAProxy's frontends, one per kind.
var haproxyPorts = map[string]int{kindHTTP: 18001, kindStream: 18002}

// haproxyRedirectPorts are HAProxy's frontends for the haproxy-redirect row,
// to the same backends. They are not haproxyPorts: after the REDIRECT a new
// connection would otherwise have the address and port of one of the
// haproxy row's, whose socket is still in TIME_WAIT, and its SYN, whose
// timestamp the client derived for another destination, would be dropped
// there (PAWS) and sent again a second later.
var haproxyRedirectPorts = map[string]int{kindHTTP: 18011, kindStream: 18012}

// haproxyVIP is the address of a kind's HAProxy frontend behind a REDIRECT:
// a virtual address, as a ClusterIP is, that a nat rule turns into the
// frontend's (redirectToHAProxy). Reached this way HAProxy pays for the
// same REDIRECT as the userspace proxy: conntrack's NAT of every packet of
// the client's connection.
func haproxyVIP(kind string) string {
	return map[string]string{kindHTTP: "198.18.1.1:80", kindStream: "198.18.1.2:80"}[kind]
}

// redirectToHAProxy adds, in the node namespace, the nat rules that lead
// haproxyVIP to HAProxy's haproxyRedirectPorts: what a portal of the userspace proxy does
// for its listener (REDIRECT in PREROUTING, for traffic that arrives from the
// client's link). The namespace, and with it the rules, ends with the bench.
func redirectToHAProxy(ctx context.Context) error {
	ipt, err := iptables.New(iptables.Config{})
	if err != nil {
		return err
	}
	for _, kind := range tcpKinds {
		vip := netip.MustParseAddrPort(haproxyVIP(kind))
		_, err := ipt.EnsureRule(ctx, iptables.Append, iptables.TableNAT, "PREROUTING",
			"-d", vip.Addr().String()+"/32", "-p", "tcp", "--dport", strconv.Itoa(int(vip.Port())),
			"-j", "REDIRECT", "--to-ports", strconv.Itoa(haproxyRedirectPorts[kind]))
		if err != nil {
			return fmt.Errorf("REDIRECT %s to HAProxy: %w", vip, err)
		}
	}
	return nil
}

// haproxyConfig is the global part; maxconn and nbthread are filled in: HAProxy refuses to
// start when the file limit cannot hold 2 descriptors per connection plus its
// splice pipes (by default maxconn/4 of them), so the pipes are capped too.
const haproxyConfig = `global
	maxconn %[1]d
	maxpipes 256
	nbthread %[2]d
defaults
	mode tcp
	option splice-auto
	timeout connect 5s
	timeout client 1m
	timeout server 1m
	maxconn %[1]d
`

// startHAProxy runs Debian's haproxy in the foreground, round-robin over the
// same backends.
func startHAProxy(ctx context.Context, b *backends, dir string, maxconn, threads int) (*child, error) {
	var cfg strings.Builder
	fmt.Fprintf(&cfg, haproxyConfig, maxconn, threads)
	for _, kind := range tcpKinds {
		fmt.Fprintf(&cfg, "frontend %s\n\tbind %s:%d\n\tdefault_backend %s\n", kind, backendIP, haproxyPorts[kind], kind)
		fmt.Fprintf(&cfg, "frontend %s-redirect\n\tbind %s:%d\n\tdefault_backend %s\n", kind, backendIP, haproxyRedirectPorts[kind], kind)
		fmt.Fprintf(&cfg, "backend %s\n\tbalance roundrobin\n", kind)
		for i, a := range b.addrs[kind] {
			fmt.Fprintf(&cfg, "\tserver s%d %s\n", i, a)
		}
	}
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg.String()), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command("haproxy", "-db", "-f", path)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("haproxy: %w", err)
	}
	c := &child{name: "haproxy", cmd: cmd}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, kind := range tcpKinds {
		for _, port := range []int{haproxyPorts[kind], haproxyRedirectPorts[kind]} {
			if err := waitListening(ctx, fmt.Sprintf("%s:%d", backendIP, port)); err != nil {
				c.stop()
				return nil, fmt.Errorf("haproxy did not come up: %w", err)
			}
		}
	}
	return c, nil
}
