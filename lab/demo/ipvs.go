package demo

import (
	"context"
	"fmt"
	"os/exec"
	"strings"

	"github.com/svcproxy/svcproxy/lab/cluster"
)

// ipvsFallback is the line svcproxy logs when --mode ipvs finds no IPVS in the
// kernel and runs iptables mode instead.
const ipvsFallback = "IPVS not available, running iptables mode instead"

// ipvs asks for IPVS mode and checks what the kernel allowed: IPVS itself,
// with web spread by its virtual server, or iptables mode after the logged
// fallback, with web still answering. It passes on both kinds of kernel.
func (d *demo) ipvs(ctx context.Context) error {
	node := d.plan.Node.Name
	d.cmd("svclab mode ipvs")
	if err := d.l.Cluster().Daemons().SetMode(ctx, "ipvs"); err != nil {
		return err
	}
	out, err := d.exec(ctx, node, "curl", "-s", cluster.MetricsAddr+"/proxyMode")
	if err != nil {
		return fmt.Errorf("/proxyMode: %w", err)
	}
	running := strings.TrimSpace(out)
	logged, err := d.exec(ctx, node, "grep", "-e", "IPVS", "-e", "starting", d.l.Net().LogPath("svcproxy"))
	if err != nil {
		return fmt.Errorf("svcproxy's log: %w", err)
	}
	// The iptables part was shown two steps ago; the IPVS part is new.
	d.cmd(`svclab rules | sed -n '/^# IPVS/,$p'`)
	rules, err := d.l.Views().RulesText(ctx)
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
	if running == "ipvs" {
		return d.ipvsSpreads(ctx)
	}
	return d.fallbackAnswers(ctx)
}

// ipvsSpreads checks that web's virtual server spreads its connections, and
// web-dual's IPv6 one.
func (d *demo) ipvsSpreads(ctx context.Context) error {
	t, err := d.traffic(ctx, 6, "web")
	if err != nil {
		return err
	}
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

// fallbackAnswers checks that web answers in the iptables mode svcproxy
// fell back to, the pods seeing the client.
func (d *demo) fallbackAnswers(ctx context.Context) error {
	client, _ := d.plan.Host("client")
	t, err := d.traffic(ctx, 6, "web")
	if err != nil {
		return err
	}
	if t.Failed > 0 || len(t.Pods) == 0 {
		return expectPods(t, "web-0", "web-1", "web-2")
	}
	if err := expectSources(t, d.plan.Names(), client.Addr); err != nil {
		return err
	}
	d.ok = "no IPVS in this kernel: svcproxy said so and runs iptables mode; web still answers"
	return nil
}
