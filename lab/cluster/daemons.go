package cluster

import (
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

// Addresses of the node's own servers. Health and metrics stay on the node's
// loopback, as kube-proxy's metrics do; svclab reaches them by entering the
// node's namespace.
const (
	healthzAddr    = "127.0.0.1:10256"
	MetricsAddr    = "127.0.0.1:10249"
	dnsMetricsAddr = "127.0.0.1:9153"
	// dnsUpstream is a closed port: the lab has no way out, so names outside
	// cluster.local fail at once (SERVFAIL) instead of timing out.
	dnsUpstream = "127.0.0.1:1"
)

// Daemons are the node's svcproxy and clusterdns. In the file-fed and the
// control-plane lab they are processes of the node's namespace, which
// Daemons starts, restarts in another mode and stops; on the real node they
// are pods of deploy/realnode, whose mode Daemons changes through the API
// server. Either way svcproxy's metrics server answers in the node.
type Daemons struct {
	c   *Cluster
	net *topology.Net
}

// dnsListen is where clusterdns listens: port 53 of the node's address, the
// kube-dns Service's endpoint.
func (d *Daemons) dnsListen() string { return net.JoinHostPort(d.net.Plan().Node.Addr.String(), "53") }

// startDNS starts clusterdns in the node and waits until it answers a query.
func (d *Daemons) startDNS(ctx context.Context, bin string) error {
	src, err := d.source("clusterdns")
	if err != nil {
		return err
	}
	argv := append([]string{bin}, src...)
	argv = append(argv,
		"--listen", d.dnsListen(),
		"--zone", "cluster.local",
		"--upstream", dnsUpstream,
		"--metrics-bind-address", dnsMetricsAddr,
		// One log line per query, so a learner can count what a resolver
		// sends (tutorials/06-dns-deeper.md: the cost of ndots:5).
		"--log-queries",
	)
	cmd, _, err := d.net.Start("clusterdns", d.net.Plan().Node.Name, argv, false)
	if err != nil {
		return err
	}
	q := new(dns.Msg)
	q.SetQuestion("kube-dns.kube-system.svc.cluster.local.", dns.TypeA)
	return d.net.Wait(ctx, "clusterdns", cmd.Process.Pid, topology.Patient(topology.ReadyTimeout), 100*time.Millisecond, func(ctx context.Context) error {
		c, err := topology.DialIn(ctx, d.net.NodeNamespace(), "udp", d.dnsListen())
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
func (d *Daemons) source(user string) ([]string, error) {
	st, err := d.net.ReadState()
	if err != nil {
		return nil, err
	}
	if st.Kubectl != "" {
		return []string{"--kubeconfig", d.c.KubeconfigPath(user)}, nil
	}
	return []string{"--services", d.c.ManifestsPath()}, nil
}

// NodeGet fetches path from svcproxy's metrics server (e.g. "/status").
func (d *Daemons) NodeGet(ctx context.Context, path string) (string, error) {
	return metricsGet(ctx, nodeHTTP(d.net), path)
}

// startProxy starts svcproxy in the node and waits for its /healthz, which
// answers 200 once the first sync is done.
func (d *Daemons) startProxy(ctx context.Context, bin, mode string) error {
	src, err := d.source("svcproxy")
	if err != nil {
		return err
	}
	argv := append([]string{bin}, src...)
	argv = append(argv,
		"--mode", mode,
		"--hostname-override", d.net.Plan().Node.Name, // the pods' nodeName, for traffic policy Local
		"--healthz-bind-address", healthzAddr,
		"--metrics-bind-address", MetricsAddr,
		"--cluster-cidr", d.clusterCIDRs(),
		// hybrid: a port is hot at 10 new connections a second held for 2s
		// (svcproxy's defaults: 50 for 5s), so that `svclab traffic --rate
		// 20` promotes one in a few seconds on any machine.
		"--promote-conn-rate", "10",
		"--promote-after", "2s",
	)
	st, _ := d.net.ReadState()
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
		subtree, err := d.net.Cgroups().Subtree()
		if err != nil {
			return err
		}
		argv = append(argv, "--socklb-cgroup", subtree, "--socklb-pin-path", d.net.BPFFS().SocketLBPinPath())
	}
	cmd, _, err := d.net.Start("svcproxy", d.net.Plan().Node.Name, argv, false)
	if err != nil {
		return err
	}
	client := nodeHTTP(d.net)
	return d.net.Wait(ctx, "svcproxy", cmd.Process.Pid, topology.Patient(topology.ReadyTimeout), 100*time.Millisecond, func(ctx context.Context) error {
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
func (d *Daemons) clusterCIDRs() string {
	p := d.net.Plan()
	if p.DualStack() {
		return p.ClusterCIDR.String() + "," + p.ClusterCIDR6.String()
	}
	return p.ClusterCIDR.String()
}

// StopProxy stops the lab's svcproxy and removes its rules with `svcproxy
// --cleanup`, leaving the node without a service proxy until SetMode starts
// one again.
func (d *Daemons) StopProxy(ctx context.Context) error {
	bin, err := d.net.Binary("svcproxy")
	if err != nil {
		return err
	}
	if pid, ok := d.net.ReadPid("svcproxy", d.net.Plan().Node.Name); ok {
		if err := topology.StopPids([]int{pid}, 15*time.Second); err != nil {
			return fmt.Errorf("stop svcproxy: %w", err)
		}
		d.net.Reap()
	}
	var out strings.Builder
	// The socket LB's pins too, which would keep its programs attached
	// (topology.BPFFS).
	if err := d.net.Exec(ctx, d.net.Plan().Node.Name, []string{bin, "--cleanup", "--socklb-pin-path", d.net.BPFFS().SocketLBPinPath()}, nil, &out, &out); err != nil {
		return fmt.Errorf("svcproxy --cleanup: %w: %s", err, strings.TrimSpace(out.String()))
	}
	return nil
}

// SetMode restarts svcproxy in another mode, as kube-proxy users do by
// editing its ConfigMap and deleting its pod: stop it, remove its rules with
// `svcproxy --cleanup`, start it again, wait for /healthz.
func (d *Daemons) SetMode(ctx context.Context, mode string) error {
	_, err := d.SetModeWith(ctx, ModeOptions{Mode: mode})
	return err
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
func (d *Daemons) forgetUDPFlows(ctx context.Context) {
	for _, fam := range []string{"ipv4", "ipv6"} {
		_, _ = d.net.NodeOutput(ctx, "conntrack", "-D", "-p", "udp", "-f", fam)
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
// too. On the kubeadm cluster it says what it did (ModeChange); on the
// other labs the ModeChange is zero.
func (d *Daemons) SetModeWith(ctx context.Context, opts ModeOptions) (ModeChange, error) {
	mode := opts.Mode
	if err := CheckMode(mode); err != nil {
		return ModeChange{}, err
	}
	if s := opts.IPVSScheduler; s != "" && !kipvs.ValidScheduler(s) {
		return ModeChange{}, fmt.Errorf("IPVS scheduler %q: want one of %s", s, strings.Join(kipvs.Schedulers, ", "))
	}
	if o := opts.Offload; o != "" && (mode != "hybrid" || !slices.Contains(offloads, o)) {
		return ModeChange{}, fmt.Errorf("--offload %q: hybrid mode's kernel path, one of %s (mode %s)", o, strings.Join(offloads, ", "), mode)
	}
	if after := opts.DemoteAfter; after < 0 || (after > 0 && mode != "hybrid") {
		return ModeChange{}, fmt.Errorf("--demote-after %s: hybrid mode's, a duration > 0 (mode %s)", after, mode)
	}
	st, err := d.net.ReadState()
	if err != nil {
		return ModeChange{}, err
	}
	if st.Nodes > 0 {
		if opts.Offload != "" || opts.DemoteAfter != 0 || opts.IPVSScheduler != "" {
			return ModeChange{}, errors.New("--offload, --demote-after, --ipvs-scheduler: not on the kubeadm cluster; edit the kube-proxy ConfigMap (svclab kubectl -n kube-system edit configmap kube-proxy)")
		}
		change, err := d.c.setKubeadmMode(ctx, mode)
		if err != nil {
			return ModeChange{}, err
		}
		st.Mode = mode
		return change, d.net.WriteState(st)
	}
	if st.RealNode {
		if mode == "socklb" || opts.Offload == "socklb" {
			return ModeChange{}, ErrRealNodeSocketLB
		}
		if opts.Offload != "" || opts.DemoteAfter != 0 {
			return ModeChange{}, errors.New("--offload, --demote-after: not on the real node; its svcproxy's ConfigMap has no such keys")
		}
		if opts.IPVSScheduler != "" {
			return ModeChange{}, errors.New("--ipvs-scheduler: not on the real node; its svcproxy has no such key in its ConfigMap")
		}
		if err := d.c.setRealNodeMode(ctx, mode); err != nil {
			return ModeChange{}, err
		}
		st.Mode = mode
		return ModeChange{}, d.net.WriteState(st)
	}
	bin, err := d.net.Binary("svcproxy")
	if err != nil {
		return ModeChange{}, err
	}
	if err := d.StopProxy(ctx); err != nil {
		return ModeChange{}, err
	}
	d.forgetUDPFlows(ctx)
	st.Mode, st.IPVSScheduler, st.Offload, st.DemoteAfter = mode, opts.IPVSScheduler, opts.Offload, ""
	if opts.DemoteAfter > 0 {
		st.DemoteAfter = opts.DemoteAfter.String()
	}
	if err := d.net.WriteState(st); err != nil {
		return ModeChange{}, err
	}
	if err := d.startProxy(ctx, bin, mode); err != nil {
		return ModeChange{}, err
	}
	if st.Kubectl != "" {
		// The control-plane lab's ConfigMap says what runs (labconfigmap.go).
		return ModeChange{}, d.c.syncLabConfigMap(ctx, mode, opts.Offload)
	}
	return ModeChange{}, nil
}
