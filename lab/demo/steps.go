package demo

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/svcproxy/svcproxy/lab"
	"github.com/svcproxy/svcproxy/lab/cluster"
	"github.com/svcproxy/svcproxy/lab/pods"
	"github.com/svcproxy/svcproxy/lab/views"
)

// web are the pods behind Service web (and web-dual, web-sticky, echo).
var web = []string{"web-0", "web-1", "web-2"}

// steps is the walk, in order. The texts say why before the commands say
// how, as each lab of kubernetes-the-hard-way does.
func (d *demo) steps() []step {
	build := newStep("01-build", d.build)
	if d.cp != nil {
		build = newStep("01-build-control-plane", d.buildControlPlane)
		// etcd, kube-apiserver and kube-controller-manager start first:
		// seconds on an idle machine, a minute or more on a busy one.
		build.timeout = 3 * cluster.ControlPlaneTimeout
	}
	return []step{
		build,
		newStep("02-resolve", d.resolve),
		newStep("03-spread", d.spread),
		newStep("04-affinity", d.affinity),
		newStep("05-udp", d.udp),
		newStep("06-portals", d.portals),
		newStep("07-iptables", d.iptables),
		newStep("08-nodeport", d.nodePort),
		newStep("09-ipvs", d.ipvs),
		newStep("10-down", d.down),
	}
}

// build is `svclab up`: the file-fed lab, svcproxy in userspace mode.
func (d *demo) build(ctx context.Context) error {
	d.cmd("svclab up")
	if err := d.l.UpWith(ctx, lab.UpOptions{Mode: "userspace", Demo: true}); err != nil {
		return err
	}
	return d.l.WriteHosts(d.out)
}

// buildControlPlane is `svclab up --control-plane`, and the EndpointSlice
// controller's slice of web.
func (d *demo) buildControlPlane(ctx context.Context) error {
	d.cmd("svclab up --control-plane")
	if err := d.l.UpWith(ctx, lab.UpOptions{Mode: "userspace", ControlPlane: d.cp, Demo: true}); err != nil {
		return err
	}
	if err := d.l.WriteHosts(d.out); err != nil {
		return err
	}
	d.cmd("svclab kubectl get endpointslices -l kubernetes.io/service-name=web")
	out, err := d.l.Cluster().KubectlOut(ctx, nil, "get", "endpointslices", "-l", "kubernetes.io/service-name=web")
	fmt.Fprint(d.out, out)
	if err != nil {
		return err
	}
	// The controller lists endpoints in no fixed order.
	return expectLines(out, "198.19.1.10", "198.19.1.11", "198.19.1.12")
}

// resolve asks the cluster DNS for a Service, a headless Service and a
// dual-stack one.
func (d *demo) resolve(ctx context.Context) error {
	out, err := d.exec(ctx, "client", "dig", "+search", "+noall", "+answer", "web")
	if err != nil {
		return err
	}
	if err := expectLines(out, "web.default.svc.cluster.local.", "198.18.0.20"); err != nil {
		return err
	}
	out, err = d.exec(ctx, "client", "dig", "+search", "+noall", "+answer", "db")
	if err != nil {
		return err
	}
	if err := expectLines(out, "db.default.svc.cluster.local.", "198.19.1.20", "198.19.1.21"); err != nil {
		return err
	}
	name := "web-dual.default.svc.cluster.local"
	out, err = d.exec(ctx, "client", "dig", "+noall", "+answer", name, "A", name, "AAAA")
	if err != nil {
		return err
	}
	return expectLines(out, "198.18.0.24", "AAAA", "2001:db8:18::24")
}

// spread sends web's connections round-robin through the userspace proxy,
// over IPv4 and IPv6: every pod answers, and each sees the node.
func (d *demo) spread(ctx context.Context) error {
	t, err := d.traffic(ctx, 30, "web.default.svc.cluster.local")
	if err != nil {
		return err
	}
	if err := expectPods(t, web...); err != nil {
		return err
	}
	if err := expectSources(t, d.plan.Names(), d.plan.Node.Addr); err != nil {
		return err
	}
	t, err = d.traffic6(ctx, 12, "web-dual")
	if err != nil {
		return err
	}
	if err := expectPods(t, web...); err != nil {
		return err
	}
	return expectSources(t, d.plan.Names(), d.plan.Node.Addr6)
}

// affinity sends web-sticky's connections: one pod takes them all.
func (d *demo) affinity(ctx context.Context) error {
	t, err := d.traffic(ctx, 20, "web-sticky")
	if err != nil {
		return err
	}
	if t.Failed > 0 || len(t.Pods) != 1 {
		return expectPods(t, "(one pod)")
	}
	return nil
}

// udp sends datagrams to echo and web-dual: every pod answers, in both
// families.
func (d *demo) udp(ctx context.Context) error {
	t, err := d.traffic(ctx, 12, "udp://echo:7")
	if err != nil {
		return err
	}
	if err := expectPods(t, web...); err != nil {
		return err
	}
	t, err = d.traffic6(ctx, 12, "udp://web-dual:7")
	if err != nil {
		return err
	}
	return expectPods(t, web...)
}

// portals shows the userspace mode's REDIRECT rules, in iptables and
// ip6tables.
func (d *demo) portals(ctx context.Context) error {
	d.cmd("svclab rules")
	out, err := d.l.Views().Rules(ctx)
	if err != nil {
		return err
	}
	if err := expectLines(out, "SVCP-PORTALS", "-d 198.18.0.20/32", "REDIRECT"); err != nil {
		return err
	}
	d.cmd("svclab rules web-dual")
	out, err = d.l.Views().RulesWith(ctx, views.RulesOptions{Service: "web-dual"})
	if err != nil {
		return err
	}
	return expectLines(out, "-d 198.18.0.24/32", "# IPv6: ip6tables", "-d 2001:db8:18::24/128", "REDIRECT")
}

// iptables switches svcproxy to iptables mode: DNAT rules instead of the
// portals, and the pods see the client itself, in both families.
func (d *demo) iptables(ctx context.Context) error {
	d.cmd("svclab mode iptables")
	if err := d.l.Cluster().Daemons().SetMode(ctx, "iptables"); err != nil {
		return err
	}
	d.cmd("svclab rules")
	out, err := d.l.Views().Rules(ctx)
	if err != nil {
		return err
	}
	if err := expectLines(out, "SVCP-SERVICES", "-d 198.18.0.20/32", "--probability", "DNAT --to-destination 198.19.1.10:8080"); err != nil {
		return err
	}
	if strings.Contains(out, "REDIRECT") {
		return errors.New("the userspace portals are still there after --cleanup")
	}
	client, _ := d.plan.Host("client")
	t, err := d.traffic(ctx, 30, "web")
	if err != nil {
		return err
	}
	if t.Failed > 0 || len(t.Pods) < 2 {
		return expectPods(t, web...)
	}
	if err := expectSources(t, d.plan.Names(), client.Addr); err != nil {
		return err
	}
	t, err = d.traffic6(ctx, 30, "web-dual")
	if err != nil {
		return err
	}
	if t.Failed > 0 || len(t.Pods) < 2 {
		return expectPods(t, web...)
	}
	return expectSources(t, d.plan.Names(), client.Addr6)
}

// nodePort reaches web-nodeport and web-dual on the node's addresses, as
// from outside.
func (d *demo) nodePort(ctx context.Context) error {
	t, err := d.traffic(ctx, 10, d.plan.Node.Addr.String()+":30080")
	if err != nil {
		return err
	}
	if t.Failed > 0 || len(t.Pods) == 0 {
		return expectPods(t, web...)
	}
	target := netip.AddrPortFrom(d.plan.Node.Addr6, 30082).String()
	d.cmd(fmt.Sprintf("svclab traffic --n 10 %s", shell(target)))
	t, err = d.l.Pods().Traffic(ctx, pods.TrafficOptions{Target: target, N: 10})
	if err != nil {
		return err
	}
	if t.Failed > 0 || len(t.Pods) == 0 {
		return expectPods(t, web...)
	}
	return nil
}

// down is `svclab down`, and nothing left behind.
func (d *demo) down(ctx context.Context) error {
	d.cmd("svclab down")
	if err := d.l.Down(ctx); err != nil {
		return err
	}
	if left := d.l.Leftovers(); len(left) > 0 {
		return errors.New("left behind: " + strings.Join(left, "; "))
	}
	return nil
}
