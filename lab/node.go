package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"

	kipvs "github.com/svcproxy/svcproxy/kernel/ipvs"
	"github.com/svcproxy/svcproxy/lab/topology"
)

// readyTimeout bounds how long a lab process may take to start serving.
const readyTimeout = 30 * time.Second

// startPod starts `svclab pod` in h's namespace and waits for its ready line.
func (l *Lab) startPod(ctx context.Context, h topology.Host) error {
	name := "pod-" + h.Name
	argv := []string{l.cfg.Self, "pod", "--name", h.Name, "--ready-fd", "3"}
	if len(h.TCP) > 0 {
		argv = append(argv, "--tcp", joinPorts(h.TCP))
	}
	if len(h.UDP) > 0 {
		argv = append(argv, "--udp", joinPorts(h.UDP))
	}
	_, ready, err := l.net.Start(name, h.Name, argv, true)
	if err != nil {
		return err
	}
	defer ready.Close()
	_ = ready.SetReadDeadline(time.Now().Add(topology.Patient(readyTimeout)))
	// The child writes one line once its ports are bound; EOF means it died.
	line, err := bufio.NewReader(ready).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		return fmt.Errorf("pod %s: did not become ready: %v%s", h.Name, err, l.net.LogTail(name))
	}
	return nil
}

func joinPorts(ps []uint16) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = fmt.Sprint(p)
	}
	return strings.Join(s, ",")
}

// dnsListen is where clusterdns listens: port 53 of the node's address, the
// kube-dns Service's endpoint.
func (l *Lab) dnsListen() string { return net.JoinHostPort(l.cfg.Plan.Node.Addr.String(), "53") }

// startDNS starts clusterdns in the node and waits until it answers a query.
func (l *Lab) startDNS(ctx context.Context, bin string) error {
	src, err := l.source("clusterdns")
	if err != nil {
		return err
	}
	argv := append([]string{bin}, src...)
	argv = append(argv,
		"--listen", l.dnsListen(),
		"--zone", "cluster.local",
		"--upstream", dnsUpstream,
		"--metrics-bind-address", dnsMetricsAddr,
		// One log line per query, so a learner can count what a resolver
		// sends (tutorials/06-dns-deeper.md: the cost of ndots:5).
		"--log-queries",
	)
	cmd, _, err := l.net.Start("clusterdns", l.cfg.Plan.Node.Name, argv, false)
	if err != nil {
		return err
	}
	q := new(dns.Msg)
	q.SetQuestion("kube-dns.kube-system.svc.cluster.local.", dns.TypeA)
	return l.net.Wait(ctx, "clusterdns", cmd.Process.Pid, topology.Patient(readyTimeout), 100*time.Millisecond, func(ctx context.Context) error {
		c, err := topology.DialIn(ctx, l.net.NodeNamespace(), "udp", l.dnsListen())
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(200 * time.Millisecond))
		co := &dns.Conn{Conn: c}
		if err := co.WriteMsg(q); err != nil {
			return err
		}
		r, err := co.ReadMsg()
		if err != nil {
			return err
		}
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
			return fmt.Errorf("kube-dns.kube-system.svc.cluster.local: %s", dns.RcodeToString[r.Rcode])
		}
		return nil
	})
}

// source is where svcproxy or clusterdns (user) gets Services from: the
// manifests file, or the lab's API server with the user's ServiceAccount token.
func (l *Lab) source(user string) ([]string, error) {
	st, err := l.net.ReadState()
	if err != nil {
		return nil, err
	}
	if st.Kubectl != "" {
		return []string{"--kubeconfig", l.KubeconfigPath(user)}, nil
	}
	return []string{"--services", l.ManifestsPath()}, nil
}

// nodeHTTP is an HTTP client whose connections start inside the node.
func (l *Lab) nodeHTTP() *http.Client {
	return &http.Client{
		Timeout: topology.Patient(2 * time.Second),
		Transport: &http.Transport{
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return topology.DialIn(ctx, l.net.NodeNamespace(), network, addr)
			},
		},
	}
}

// NodeGet fetches path from svcproxy's metrics server (e.g. "/status").
func (l *Lab) NodeGet(ctx context.Context, path string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+metricsAddr+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := l.nodeHTTP().Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return string(b), err
}

// startProxy starts svcproxy in the node and waits for its /healthz, which
// answers 200 once the first sync is done.
func (l *Lab) startProxy(ctx context.Context, bin, mode string) error {
	src, err := l.source("svcproxy")
	if err != nil {
		return err
	}
	argv := append([]string{bin}, src...)
	argv = append(argv,
		"--mode", mode,
		"--hostname-override", l.cfg.Plan.Node.Name, // the pods' nodeName, for traffic policy Local
		"--healthz-bind-address", healthzAddr,
		"--metrics-bind-address", metricsAddr,
		"--cluster-cidr", l.clusterCIDRs(),
		// hybrid: a port is hot at 10 new connections a second held for 2s
		// (svcproxy's defaults: 50 for 5s), so that `svclab traffic --rate
		// 20` promotes one in a few seconds on any machine.
		"--promote-conn-rate", "10",
		"--promote-after", "2s",
	)
	st, _ := l.net.ReadState()
	if st.IPVSScheduler != "" {
		argv = append(argv, "--ipvs-scheduler", st.IPVSScheduler)
	}
	if mode == "hybrid" && st.Offload != "" {
		argv = append(argv, "--offload", st.Offload)
	}
	if mode == "hybrid" && st.DemoteAfter != "" {
		argv = append(argv, "--demote-after", st.DemoteAfter)
	}
	if mode == "socklb" || (mode == "hybrid" && st.Offload == "socklb") {
		// The socket LB attaches at the lab's cgroup2 subtree, where every
		// pod's and the client's processes run (topology/cgroup.go), as Cilium
		// attaches at a node's cgroup2 root.
		subtree, err := l.net.Cgroups().Subtree()
		if err != nil {
			return err
		}
		argv = append(argv, "--socklb-cgroup", subtree, "--socklb-pin-path", l.net.BPFFS().SocketLBPinPath())
	}
	cmd, _, err := l.net.Start("svcproxy", l.cfg.Plan.Node.Name, argv, false)
	if err != nil {
		return err
	}
	client := l.nodeHTTP()
	return l.net.Wait(ctx, "svcproxy", cmd.Process.Pid, topology.Patient(readyTimeout), 100*time.Millisecond, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+healthzAddr+"/healthz", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/healthz: %s: %s", resp.Status, strings.TrimSpace(string(body)))
		}
		return nil
	})
}

// clusterCIDRs is svcproxy's --cluster-cidr: the pod range of each family.
func (l *Lab) clusterCIDRs() string {
	p := l.cfg.Plan
	if p.DualStack() {
		return p.ClusterCIDR.String() + "," + p.ClusterCIDR6.String()
	}
	return p.ClusterCIDR.String()
}

// StopProxy stops the lab's svcproxy and removes its rules with `svcproxy
// --cleanup`, leaving the node without a service proxy until SetMode starts
// one again.
func (l *Lab) StopProxy(ctx context.Context) error {
	bin, err := l.net.Binary("svcproxy")
	if err != nil {
		return err
	}
	if pid, ok := l.net.ReadPid("svcproxy", l.cfg.Plan.Node.Name); ok {
		if err := topology.StopPids([]int{pid}, 15*time.Second); err != nil {
			return fmt.Errorf("stop svcproxy: %w", err)
		}
		l.net.Reap()
	}
	var out strings.Builder
	// The socket LB's pins too, which would keep its programs attached
	// (socklbview.go).
	if err := l.net.Exec(ctx, l.cfg.Plan.Node.Name, []string{bin, "--cleanup", "--socklb-pin-path", l.net.BPFFS().SocketLBPinPath()}, nil, &out, &out); err != nil {
		return fmt.Errorf("svcproxy --cleanup: %w: %s", err, strings.TrimSpace(out.String()))
	}
	return nil
}

// SetMode restarts svcproxy in another mode, as kube-proxy users do by
// editing its ConfigMap and deleting its pod: stop it, remove its rules with
// `svcproxy --cleanup`, start it again, wait for /healthz.
func (l *Lab) SetMode(ctx context.Context, mode string) error {
	return l.SetModeWith(ctx, ModeOptions{Mode: mode})
}

// forgetUDPFlows deletes the node's UDP conntrack entries between two
// svcproxy processes. The old mode's UDP flows (a REDIRECT to its userspace
// listener, say) outlive it by up to 30 s, and a client whose new socket
// happens to get a source port one of them used is sent where that flow went:
// to a listener that is gone (refused). The iptables and nftables modes delete
// such flows at their first sync, as kube-proxy does, but the IPVS and
// userspace modes do not (docs/operations.md, "UDP entries at the first
// sync"), so the lab does it for every switch. Best effort: a node without
// the conntrack tool keeps them, and "0 flow entries" is an exit status of 1.
func (l *Lab) forgetUDPFlows(ctx context.Context) {
	for _, fam := range []string{"ipv4", "ipv6"} {
		_, _ = l.net.NodeOutput(ctx, "conntrack", "-D", "-p", "udp", "-f", fam)
	}
}

// ModeOptions are the flags of `svclab mode`: svcproxy's configuration, all of
// it (what is not given is svcproxy's default).
type ModeOptions struct {
	Mode string
	// IPVSScheduler is svcproxy's --ipvs-scheduler; "" is rr.
	IPVSScheduler string
	// Offload is hybrid's kernel path, svcproxy's --offload: nftables,
	// ipvs, iptables or socklb (the socket LB, at the lab's cgroup2
	// subtree); "" is svcproxy's default, nftables.
	Offload string
	// DemoteAfter is hybrid's --demote-after: how long a promoted port must
	// stay below the promotion rate before it returns to userspace; 0 is
	// svcproxy's default (5m).
	DemoteAfter time.Duration
}

// offloads are the kernel paths hybrid mode promotes to (svcproxy's
// --offload).
var offloads = []string{"nftables", "ipvs", "iptables", "socklb"}

// SetModeWith is SetMode with the IPVS scheduler and hybrid's kernel path
// too.
func (l *Lab) SetModeWith(ctx context.Context, opts ModeOptions) error {
	mode := opts.Mode
	if err := checkMode(mode); err != nil {
		return err
	}
	if s := opts.IPVSScheduler; s != "" && !kipvs.ValidScheduler(s) {
		return fmt.Errorf("IPVS scheduler %q: want one of %s", s, strings.Join(kipvs.Schedulers, ", "))
	}
	if o := opts.Offload; o != "" && (mode != "hybrid" || !slices.Contains(offloads, o)) {
		return fmt.Errorf("--offload %q: hybrid mode's kernel path, one of %s (mode %s)", o, strings.Join(offloads, ", "), mode)
	}
	if d := opts.DemoteAfter; d < 0 || (d > 0 && mode != "hybrid") {
		return fmt.Errorf("--demote-after %s: hybrid mode's, a duration > 0 (mode %s)", d, mode)
	}
	st, err := l.net.ReadState()
	if err != nil {
		return err
	}
	if st.RealNode {
		if mode == "socklb" || opts.Offload == "socklb" {
			return errRealNodeSocketLB
		}
		if opts.Offload != "" || opts.DemoteAfter != 0 {
			return errors.New("--offload, --demote-after: not on the real node; its svcproxy's ConfigMap has no such keys")
		}
		if opts.IPVSScheduler != "" {
			return errors.New("--ipvs-scheduler: not on the real node; its svcproxy has no such key in its ConfigMap")
		}
		if err := l.setRealNodeMode(ctx, mode); err != nil {
			return err
		}
		st.Mode = mode
		return l.net.WriteState(st)
	}
	bin, err := l.net.Binary("svcproxy")
	if err != nil {
		return err
	}
	if err := l.StopProxy(ctx); err != nil {
		return err
	}
	l.forgetUDPFlows(ctx)
	st.Mode, st.IPVSScheduler, st.Offload, st.DemoteAfter = mode, opts.IPVSScheduler, opts.Offload, ""
	if opts.DemoteAfter > 0 {
		st.DemoteAfter = opts.DemoteAfter.String()
	}
	if err := l.net.WriteState(st); err != nil {
		return err
	}
	return l.startProxy(ctx, bin, mode)
}
