package lab

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// ipvsFallback is the line svcproxy logs when --mode ipvs finds no IPVS in the
// kernel and runs iptables mode instead.
const ipvsFallback = "IPVS not available, running iptables mode instead"

// ipvsStep asks for IPVS mode and checks what the kernel allowed: IPVS itself,
// with web spread by its virtual server, or iptables mode after the logged
// fallback, with web still answering. It passes on both kinds of kernel.
func (l *Lab) ipvsStep() step {
	p := l.cfg.Plan
	node := p.Node.Name
	client, _ := p.Host("client")
	return step{
		title: "IPVS mode",
		why: `kube-proxy's IPVS mode hands each Service port to the kernel's load balancer:
a virtual server whose real servers are the pods. A packet costs one hash
lookup however many Services there are, where iptables walks a chain. The
ClusterIPs of both families sit on a dummy interface, svcp-ipvs0, so the node
accepts them; a scheduler picks the pod (rr by default; lc, sh and five more),
with a virtual server per family for a dual-stack Service. On a kernel
without IPVS, svcproxy logs why and runs iptables mode, as kube-proxy does.
`,
		run: func(ctx context.Context, d *demo) error {
			d.cmd("svclab mode ipvs")
			if err := l.SetMode(ctx, "ipvs"); err != nil {
				return err
			}
			out, err := d.exec(ctx, node, "curl", "-s", metricsAddr+"/proxyMode")
			if err != nil {
				return fmt.Errorf("/proxyMode: %w", err)
			}
			running := strings.TrimSpace(out)
			logged, err := d.exec(ctx, node, "grep", "-e", "IPVS", "-e", "starting", l.net.LogPath("svcproxy"))
			if err != nil {
				return fmt.Errorf("svcproxy's log: %w", err)
			}
			// The iptables part was shown two steps ago; the IPVS part is new.
			d.cmd(`svclab rules | sed -n '/^# IPVS/,$p'`)
			rules, err := l.rules(ctx)
			if err != nil {
				return err
			}
			if i := strings.Index(rules, "\n# IPVS"); i >= 0 {
				fmt.Fprint(d.out, rules[i+1:])
			}
			switch running {
			case "ipvs":
				if _, lookErr := exec.LookPath("ipvsadm"); lookErr == nil {
					// web-dual has a virtual server per family.
					err = expectLines(rules, "# IPVS (ipvsadm -ln)", "198.18.0.20:80", "[2001:db8:18::24]:80")
				}
			case "iptables":
				err = expectLines(logged+rules, ipvsFallback, "SVCP-SERVICES")
			default:
				err = fmt.Errorf("/proxyMode says %q, want ipvs, or iptables after the fallback", running)
			}
			if err != nil {
				return err
			}
			t, err := d.traffic(ctx, 6, "web")
			if err != nil {
				return err
			}
			if running == "ipvs" {
				if t.Failed > 0 || len(t.Pods) < 2 {
					return expectPods(t, "web-0", "web-1", "web-2")
				}
				if t, err = d.traffic6(ctx, 6, "web-dual"); err != nil {
					return err
				}
				if t.Failed > 0 || len(t.Pods) < 2 {
					return expectPods(t, "web-0", "web-1", "web-2")
				}
				d.ok = "svcproxy runs IPVS mode: web's virtual server spread the connections, and web-dual's IPv6 one too"
				return nil
			}
			if t.Failed > 0 || len(t.Pods) == 0 {
				return expectPods(t, "web-0", "web-1", "web-2")
			}
			if err := expectSources(t, p.Names(), client.Addr); err != nil {
				return err
			}
			d.ok = "no IPVS in this kernel: svcproxy said so and runs iptables mode; web still answers"
			return nil
		},
		ok: "svcproxy runs the mode the kernel allows",
	}
}
