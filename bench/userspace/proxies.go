package main

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/service"
	"github.com/svcproxy/svcproxy/userspace"
)

// vip is the ClusterIP of the benchmark Service of a kind: 198.18.0.1 for conn,
// .2 for rr, .3 for stream, all on port 80.
func vip(kind string) string {
	for i, k := range kinds {
		if k == kind {
			return fmt.Sprintf("198.18.0.%d:80", i+1)
		}
	}
	panic("unknown kind " + kind)
}

// runProxier is the child process: a userspace.Proxier with its portals, serving
// one Service per kind, until SIGTERM. It prints "ready" once synced.
func runProxier(backendFlag string) error {
	ipt, err := iptables.New(iptables.Config{})
	if err != nil {
		return err
	}
	p := userspace.New(userspace.Config{IPTables: ipt})
	var svcs []*service.Service
	for _, kindAddrs := range strings.Split(backendFlag, ";") {
		kind, addrs, _ := strings.Cut(kindAddrs, "=")
		svcs = append(svcs, benchService(kind, strings.Split(addrs, ",")))
	}
	if err := p.Sync(service.NewSnapshot(svcs, nil)); err != nil {
		return err
	}
	fmt.Println("ready")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return p.Run(ctx)
}

func benchService(kind string, addrs []string) *service.Service {
	vip := netip.MustParseAddrPort(vip(kind))
	svc := &service.Service{
		NamespacedName: service.NamespacedName{Namespace: "bench", Name: kind},
		Type:           service.TypeClusterIP,
		ClusterIPs:     []netip.Addr{vip.Addr()},
	}
	port := &service.Port{
		Name:     service.PortName{NamespacedName: svc.NamespacedName, Protocol: service.TCP},
		Service:  svc,
		Port:     vip.Port(),
		Protocol: service.TCP,
	}
	for _, a := range addrs {
		port.Endpoints = append(port.Endpoints, service.Endpoint{Addr: netip.MustParseAddrPort(a), Ready: true, Serving: true})
	}
	svc.Ports = []*service.Port{port}
	return svc
}

// child is a proxy process the benchmark started.
type child struct {
	name string
	cmd  *exec.Cmd
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

// rssKB is the resident memory of the child, from /proc/PID/status.
func (c *child) rssKB() (int, error) {
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

// startProxier runs this program again as the proxier child.
func startProxier(b *backends) (*child, error) {
	var spec []string
	for _, kind := range kinds {
		spec = append(spec, kind+"="+strings.Join(b.addrs[kind], ","))
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "-role=proxier", "-backends="+strings.Join(spec, ";"))
	cmd.Stderr = os.Stderr
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
	if err != nil || line != "ready\n" {
		c.stop()
		return nil, fmt.Errorf("proxier child: %q, %v", line, err)
	}
	return c, nil
}

// haproxyPorts are HAProxy's frontends, one per kind.
var haproxyPorts = map[string]int{kindConn: 18001, kindRR: 18002, kindStream: 18003}

// haproxyConfig is the global part; maxconn is filled in: HAProxy refuses to
// start when the file limit cannot hold 2 descriptors per connection plus its
// splice pipes (by default maxconn/4 of them), so the pipes are capped too.
const haproxyConfig = `global
	maxconn %[1]d
	maxpipes 256
	nbthread 2
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
func startHAProxy(ctx context.Context, b *backends, dir string, maxconn int) (*child, error) {
	var cfg strings.Builder
	fmt.Fprintf(&cfg, haproxyConfig, maxconn)
	for _, kind := range kinds {
		fmt.Fprintf(&cfg, "frontend %s\n\tbind 127.0.0.1:%d\n\tdefault_backend %s\n", kind, haproxyPorts[kind], kind)
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
	for _, kind := range kinds {
		if err := waitListening(ctx, fmt.Sprintf("127.0.0.1:%d", haproxyPorts[kind])); err != nil {
			c.stop()
			return nil, fmt.Errorf("haproxy did not come up: %w", err)
		}
	}
	return c, nil
}
