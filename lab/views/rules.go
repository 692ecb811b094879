package views

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"

	knft "github.com/svcproxy/svcproxy/kernel/nftables"

	"github.com/svcproxy/svcproxy/service"
)

// RulesOptions narrow and annotate `svclab rules`.
type RulesOptions struct {
	// Service shows only the rules of one Service: "web" (namespace
	// default) or "kube-system/kube-dns". "" shows all of svcproxy's rules.
	Service string
	// Counters shows the kernel's counters: packets per iptables rule
	// (`iptables-save -c`), connections and packets per IPVS virtual and
	// real server (`ipvsadm -ln --stats`).
	Counters bool
}

// Rules writes svcproxy's rules as the node's kernel holds them: the lines of
// `iptables-save` that belong to SVCP- chains, svcproxy's nftables table
// (`nft list table ip svcproxy`) when there is one, then the IPVS table of
// `ipvsadm -ln`, or a line saying the kernel has none. It returns what it wrote.
func (v *Views) Rules(ctx context.Context) (string, error) {
	s, err := v.RulesText(ctx)
	if err != nil {
		return "", err
	}
	_, err = io.WriteString(v.stdout, s)
	return s, err
}

// RulesText is what Rules writes, unwritten.
func (v *Views) RulesText(ctx context.Context) (string, error) {
	node := v.net.Plan().Node.Name
	var save, serr bytes.Buffer
	if err := v.net.Exec(ctx, node, []string{"iptables-save"}, nil, &save, &serr); err != nil {
		return "", fmt.Errorf("iptables-save in the node: %w: %s", err, strings.TrimSpace(serr.String()))
	}
	var b strings.Builder
	b.WriteString(FilterRules(save.String(), "SVCP-"))
	var nft, nerr bytes.Buffer
	if err := v.net.Exec(ctx, node, []string{"nft", "list", "table", "ip", "svcproxy"}, nil, &nft, &nerr); err == nil {
		b.WriteString("\n# nftables (nft list table ip svcproxy)\n")
		b.WriteString(nft.String())
	} else if _, lookErr := exec.LookPath("nft"); lookErr != nil {
		b.WriteString("\n# nftables: not shown, nft is not installed (Debian: apt-get install nftables).\n")
	} else {
		b.WriteString("\n# nftables: no table ip svcproxy (svcproxy runs no nftables path).\n")
	}
	var ipvs, ierr bytes.Buffer
	if err := v.net.Exec(ctx, node, []string{"ipvsadm", "-ln"}, nil, &ipvs, &ierr); err != nil {
		msg := strings.TrimSpace(strings.SplitN(ierr.String()+ipvs.String(), "\n", 2)[0])
		if _, lookErr := exec.LookPath("ipvsadm"); lookErr != nil {
			b.WriteString("\n# IPVS: not shown, ipvsadm is not installed (Debian: apt-get install ipvsadm).\n")
		} else {
			fmt.Fprintf(&b, "\n# IPVS: none. This kernel has no IPVS, so --mode ipvs cannot run here.\n# (ipvsadm -ln: %s)\n", msg)
		}
	} else {
		b.WriteString("\n# IPVS (ipvsadm -ln)\n")
		b.WriteString(ipvs.String())
	}
	return b.String(), nil
}

// FilterRules keeps, from iptables-save output, the lines that mention prefix
// (chain declarations, jumps and rules), each under its table's "*table"
// line; tables without any are left out, and so are comments and counters.
func FilterRules(save, prefix string) string {
	var b strings.Builder
	table, printed := "", false
	for _, line := range strings.Split(save, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table, printed = line, false
		case strings.Contains(line, prefix):
			if !printed {
				if b.Len() > 0 {
					b.WriteString("\n")
				}
				b.WriteString("# table " + strings.TrimPrefix(table, "*") + "\n")
				printed = true
			}
			b.WriteString(line + "\n")
		}
	}
	if b.Len() == 0 {
		return "# no " + prefix + " rules\n"
	}
	return b.String()
}

// RulesWith writes svcproxy's rules as the node's kernel holds them, like
// Rules, narrowed to one Service and with counters when opts say so. Each
// hashed iptables chain (SVCP-SVC-..., SVCP-SEP-...) is named in a legend by
// its service port and endpoint. It returns what it wrote.
func (v *Views) RulesWith(ctx context.Context, opts RulesOptions) (string, error) {
	var svc *service.Service
	if opts.Service != "" {
		snap, err := v.src.Snapshot(ctx)
		if err != nil {
			return "", err
		}
		if svc, err = FindService(snap, opts.Service); err != nil {
			return "", err
		}
	}
	var b strings.Builder
	if svc != nil {
		fmt.Fprintf(&b, "# %s\n\n", describeService(svc))
	}
	for _, part := range []func(context.Context, *strings.Builder, *service.Service, bool) error{
		v.iptablesRules, v.socketLBRules, v.nftablesRules, v.ipvsRules, v.kubeProxyRules,
	} {
		if err := part(ctx, &b, svc, opts.Counters); err != nil {
			return "", err
		}
	}
	_, err := io.WriteString(v.stdout, b.String())
	return b.String(), err
}

// saveArgs runs prog (iptables-save, ip6tables-save), with counters ("-c")
// when asked.
func saveArgs(prog string, counters bool) []string {
	if counters {
		return []string{prog, "-c"}
	}
	return []string{prog}
}

// iptablesRules writes svcproxy's iptables chains, then its ip6tables ones
// when they serve something: any Service, or svc has an IPv6 address.
func (v *Views) iptablesRules(ctx context.Context, b *strings.Builder, svc *service.Service, counters bool) error {
	save, err := v.net.NodeOutput(ctx, saveArgs("iptables-save", counters)...)
	if err != nil {
		return err
	}
	text, err := v.formatSave(save, svc, counters)
	if err != nil {
		return err
	}
	b.WriteString(text)
	if svc != nil && !hasIPv6(svc) {
		return nil
	}
	args6 := saveArgs("ip6tables-save", counters)
	if save6, err := v.net.NodeOutput(ctx, args6...); err == nil && strings.Contains(save6, "SVCP-") {
		text, err := v.formatSave(save6, svc, counters)
		if err != nil {
			return err
		}
		b.WriteString("\n# IPv6: ip6tables (" + strings.Join(args6, " ") + ")\n\n")
		b.WriteString(text)
	}
	return nil
}

// socketLBRules writes the socket LB's maps, in socklb mode.
func (v *Views) socketLBRules(ctx context.Context, b *strings.Builder, svc *service.Service, _ bool) error {
	if mode, _ := v.net.Mode(); mode != "socklb" {
		return nil
	}
	s, err := v.socketLB()
	if err != nil {
		return err
	}
	d, err := v.socketLBDump(ctx, s)
	if err != nil {
		return err
	}
	if svc != nil {
		d = onlyService(d, svc)
	}
	b.WriteString(v.formatSocketLB(s, d, v.hostCookies()))
	return nil
}

// nftablesRules writes svcproxy's nftables tables, ip then ip6: all of
// each, or the lines of svc.
func (v *Views) nftablesRules(ctx context.Context, b *strings.Builder, svc *service.Service, _ bool) error {
	nft, err := v.net.NodeOutput(ctx, "nft", "list", "table", "ip", "svcproxy")
	switch {
	case err == nil && svc != nil:
		b.WriteString("\n# nftables (nft list table ip svcproxy), the lines of " + svc.NamespacedName.String() + "\n")
		tab, perr := knft.ParseListing(nft)
		if perr != nil {
			return perr
		}
		b.WriteString(formatService(tab, svc.NamespacedName))
	case err == nil:
		b.WriteString("\n# nftables (nft list table ip svcproxy)\n")
		b.WriteString(nft)
	default:
		if _, lookErr := exec.LookPath("nft"); lookErr != nil {
			b.WriteString("\n# nftables: not shown, nft is not installed (Debian: apt-get install nftables).\n")
		} else {
			b.WriteString("\n# nftables: no table ip svcproxy (svcproxy runs no nftables path).\n")
		}
	}
	nft6, err := v.net.NodeOutput(ctx, "nft", "list", "table", "ip6", "svcproxy")
	if err != nil {
		return nil
	}
	switch {
	case svc != nil && hasIPv6(svc):
		b.WriteString("\n# IPv6: nftables (nft list table ip6 svcproxy), the lines of " + svc.NamespacedName.String() + "\n")
		tab, perr := knft.ParseListing(nft6)
		if perr != nil {
			return perr
		}
		b.WriteString(formatService(tab, svc.NamespacedName))
	case svc == nil:
		b.WriteString("\n# IPv6: nftables (nft list table ip6 svcproxy)\n")
		b.WriteString(nft6)
	}
	return nil
}

// ipvsRules writes the IPVS table (svc's virtual servers), or why there is
// none.
func (v *Views) ipvsRules(ctx context.Context, b *strings.Builder, svc *service.Service, counters bool) error {
	ipvsArgs := []string{"ipvsadm", "-ln"}
	if counters {
		ipvsArgs = append(ipvsArgs, "--stats")
	}
	ipvs, err := v.net.NodeOutput(ctx, ipvsArgs...)
	if err == nil {
		fmt.Fprintf(b, "\n# IPVS (%s)\n", strings.Join(ipvsArgs, " "))
		if svc != nil {
			addrs, aerr := v.nodeAddrs(ctx)
			if aerr != nil {
				return aerr
			}
			ipvs = filterIPVS(ipvs, serviceVIPs(svc, addrs))
		}
		b.WriteString(ipvs)
		return nil
	}
	if _, lookErr := exec.LookPath("ipvsadm"); lookErr != nil {
		b.WriteString("\n# IPVS: not shown, ipvsadm is not installed (Debian: apt-get install ipvsadm).\n")
		return nil
	}
	msg := strings.TrimSpace(strings.SplitN(err.Error(), "\n", 2)[0])
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	fmt.Fprintf(b, "\n# IPVS: none. This kernel has no IPVS, so --mode ipvs cannot run here.\n# (ipvsadm -ln: %s)\n", msg)
	return nil
}
