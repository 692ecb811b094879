package lab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/svcproxy/svcproxy/lab/cluster"
	"github.com/svcproxy/svcproxy/lab/pods"
	"github.com/svcproxy/svcproxy/lab/views"
)

// demoSteps is the walk, in order. The texts say why before the commands say
// how, as each lab of kubernetes-the-hard-way does.
func (l *Lab) demoSteps() []step {
	p := l.cfg.Plan
	names := p.Names()
	client, _ := p.Host("client")
	web := []string{"web-0", "web-1", "web-2"}
	return []step{
		l.buildStep(),
		{
			title: "Resolve a Service's name",
			why: `A pod's resolv.conf names the cluster DNS Service (kube-dns, 198.18.0.10) and
searches default.svc.cluster.local first, so "web" is found as
web.default.svc.cluster.local, the ClusterIP of Service web. A headless Service
(clusterIP: None) has no ClusterIP: its name resolves to the pods themselves.
The lab is dual-stack: web-dual (ipFamilyPolicy: PreferDualStack) has a
ClusterIP of each family, an A record and an AAAA record.
`,
			run: func(ctx context.Context, d *demo) error {
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
			},
			ok: "web is 198.18.0.20, a virtual address; db is its two pods; web-dual has one address per family",
		},
		{
			title: "Spread over three pods",
			why: `Thirty connections to web. In userspace mode an iptables REDIRECT rule (a
"portal") hands each one to svcproxy, which picks a pod round-robin and opens a
connection of its own to it. So each pod gets every third connection, and each
saw the node's address, not the client's: the proxy is the pods' client. Over
IPv6 (web-dual's AAAA), the same: an ip6tables portal, svcproxy, the pods.
`,
			run: func(ctx context.Context, d *demo) error {
				t, err := d.traffic(ctx, 30, "web.default.svc.cluster.local")
				if err != nil {
					return err
				}
				if err := expectPods(t, web...); err != nil {
					return err
				}
				if err := expectSources(t, names, p.Node.Addr); err != nil {
					return err
				}
				t, err = d.traffic6(ctx, 12, "web-dual")
				if err != nil {
					return err
				}
				if err := expectPods(t, web...); err != nil {
					return err
				}
				return expectSources(t, names, p.Node.Addr6)
			},
			ok: "three pods shared the connections; each saw the node (198.19.0.1, over IPv6 2001:db8:19::1) as its client",
		},
		{
			title: "Session affinity: ClientIP",
			why: `Service web-sticky has the same pods and sessionAffinity: ClientIP. The proxy
remembers which pod a client address got and sends every later connection from
that address there, until the client is idle for timeoutSeconds. (web-sticky
is SingleStack IPv4; affinity works per client address in either family.)
`,
			run: func(ctx context.Context, d *demo) error {
				t, err := d.traffic(ctx, 20, "web-sticky")
				if err != nil {
					return err
				}
				if t.Failed > 0 || len(t.Pods) != 1 {
					return expectPods(t, "(one pod)")
				}
				return nil
			},
			ok: "one pod took every connection",
		},
		{
			title: "A UDP Service",
			why: `UDP has no connections, so the proxy makes sessions: datagrams from one client
address and port go to one pod, until the session is idle. Each request here
comes from a new socket, so each is a new session and they spread.
`,
			run: func(ctx context.Context, d *demo) error {
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
			},
			ok: "every datagram was answered, by all three pods in turn, in both families",
		},
		{
			title: "The portal rules",
			why: `Where did the packets turn? svcproxy wrote iptables rules in the node. In the
nat table, PREROUTING (packets from pods) jumps to SVCP-PORTALS-CONTAINER and
OUTPUT (the node's own) to SVCP-PORTALS-HOST; their rules REDIRECT each
ClusterIP:port to the local port where svcproxy listens for that service port.
In the filter table, SVCP-REJECT refuses ports that have no endpoints at once.
IPv6 has the same chains in ip6tables: svcproxy runs one proxier per family.
`,
			run: func(ctx context.Context, d *demo) error {
				d.cmd("svclab rules")
				out, err := l.views.Rules(ctx)
				if err != nil {
					return err
				}
				if err := expectLines(out, "SVCP-PORTALS", "-d 198.18.0.20/32", "REDIRECT"); err != nil {
					return err
				}
				d.cmd("svclab rules web-dual")
				out, err = l.views.RulesWith(ctx, views.RulesOptions{Service: "web-dual"})
				if err != nil {
					return err
				}
				return expectLines(out, "-d 198.18.0.24/32", "# IPv6: ip6tables", "-d 2001:db8:18::24/128", "REDIRECT")
			},
			ok: "each ClusterIP:port has a REDIRECT to svcproxy, in iptables and ip6tables",
		},
		{
			title: "Switch to iptables mode",
			why: `kube-proxy's iptables mode takes Go off the data path: svcproxy writes DNAT rules
and the kernel rewrites each new connection's destination to a pod, chosen by
the statistic match (1/3, then 1/2, then the last), and conntrack remembers it.
The packet the pod receives is the client's own, so the pod now sees the
client's address. kube-proxy users switch modes by editing its ConfigMap and
restarting it; here: stop svcproxy, run svcproxy --cleanup, start it again.
ip6tables does the same for web-dual's IPv6 ClusterIP.
`,
			run: func(ctx context.Context, d *demo) error {
				d.cmd("svclab mode iptables")
				if err := l.cluster.Daemons().SetMode(ctx, "iptables"); err != nil {
					return err
				}
				d.cmd("svclab rules")
				out, err := l.views.Rules(ctx)
				if err != nil {
					return err
				}
				if err := expectLines(out, "SVCP-SERVICES", "-d 198.18.0.20/32", "--probability", "DNAT --to-destination 198.19.1.10:8080"); err != nil {
					return err
				}
				if strings.Contains(out, "REDIRECT") {
					return errors.New("the userspace portals are still there after --cleanup")
				}
				t, err := d.traffic(ctx, 30, "web")
				if err != nil {
					return err
				}
				if t.Failed > 0 || len(t.Pods) < 2 {
					return expectPods(t, web...)
				}
				if err := expectSources(t, names, client.Addr); err != nil {
					return err
				}
				t, err = d.traffic6(ctx, 30, "web-dual")
				if err != nil {
					return err
				}
				if t.Failed > 0 || len(t.Pods) < 2 {
					return expectPods(t, web...)
				}
				return expectSources(t, names, client.Addr6)
			},
			ok: "the kernel spread the connections, and the pods saw the client (198.19.1.2, over IPv6 2001:db8:19::1:2) itself",
		},
		{
			title: "A NodePort",
			why: `A NodePort Service is reached from outside the cluster on a port of every node
address: here 198.19.0.1:30080. The rules send it on to the same pods; such
traffic is masqueraded (externalTrafficPolicy: Cluster), so replies come back
through this node even when the pod is on another. web-dual's NodePort 30082
is open on both node addresses, 198.19.0.1 and 2001:db8:19::1.
`,
			run: func(ctx context.Context, d *demo) error {
				t, err := d.traffic(ctx, 10, p.Node.Addr.String()+":30080")
				if err != nil {
					return err
				}
				if t.Failed > 0 || len(t.Pods) == 0 {
					return expectPods(t, web...)
				}
				target := netip.AddrPortFrom(p.Node.Addr6, 30082).String()
				d.cmd(fmt.Sprintf("svclab traffic --n 10 %s", shell(target)))
				t, err = l.pods.Traffic(ctx, pods.TrafficOptions{Target: target, N: 10})
				if err != nil {
					return err
				}
				if t.Failed > 0 || len(t.Pods) == 0 {
					return expectPods(t, web...)
				}
				return nil
			},
			ok: "the node ports reached the web pods, on the node's IPv4 and IPv6 addresses",
		},
		l.ipvsStep(),
		{
			title: "Take it all down",
			why: `Deleting a network namespace deletes its links, routes and rules with it. svclab
stops every process in the lab's namespaces, deletes the namespaces and removes
its files.
`,
			run: func(ctx context.Context, d *demo) error {
				d.cmd("svclab down")
				if err := l.Down(ctx); err != nil {
					return err
				}
				if left := l.Leftovers(); len(left) > 0 {
					return errors.New("left behind: " + strings.Join(left, "; "))
				}
				return nil
			},
			ok: "no namespace, process, mount or file of the lab is left",
		},
	}
}

// buildStep is the demo's first: `svclab up`, on a control plane when the
// Config names one.
func (l *Lab) buildStep() step {
	why := `A node is a network namespace with svcproxy and clusterdns running in it. Each pod
is a namespace of its own, wired to the node by a veth pair and routed like
Calico routes pods: a /32 route per pod on the node; on the pod, routes to the
Service and pod ranges via the node, and no way out. Every pod runs a tiny
server that answers with its name and the address it saw the client come from.
`
	if l.cfg.ControlPlane == nil {
		return step{
			title: "Build the lab",
			why: why + `Services and their EndpointSlices come from one manifests file, as an API
server would serve them.
`,
			run: func(ctx context.Context, d *demo) error {
				d.cmd("svclab up")
				if err := l.Up(ctx, "userspace"); err != nil {
					return err
				}
				return l.WriteHosts(d.out)
			},
			ok: "the node runs svcproxy (userspace mode) and clusterdns; five pods answer",
		}
	}
	return step{
		title: "Build the lab, with a control plane",
		why: why + `The node also runs a real control plane: etcd, kube-apiserver and
kube-controller-manager. Services and two StatefulSets (web, db) are applied
with kubectl; svclab plays the kubelet, starting each pod and reporting it
Ready; the EndpointSlice controller writes the slices; svcproxy and clusterdns
watch them with their ServiceAccounts' tokens.
`,
		run: func(ctx context.Context, d *demo) error {
			d.cmd("svclab up --control-plane")
			if err := l.UpWith(ctx, UpOptions{Mode: "userspace", ControlPlane: l.cfg.ControlPlane}); err != nil {
				return err
			}
			if err := l.WriteHosts(d.out); err != nil {
				return err
			}
			d.cmd("svclab kubectl get endpointslices -l kubernetes.io/service-name=web")
			out, err := l.cluster.KubectlOut(ctx, nil, "get", "endpointslices", "-l", "kubernetes.io/service-name=web")
			fmt.Fprint(d.out, out)
			if err != nil {
				return err
			}
			// The controller lists endpoints in no fixed order.
			return expectLines(out, "198.19.1.10", "198.19.1.11", "198.19.1.12")
		},
		// etcd, kube-apiserver and kube-controller-manager start first:
		// seconds on an idle machine, a minute or more on a busy one.
		timeout: 3 * cluster.ControlPlaneTimeout,
		ok:      "the control plane runs; the EndpointSlice controller wrote web's slice; five pods answer",
	}
}
