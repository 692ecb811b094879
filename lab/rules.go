package lab

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
)

// Rules writes svcproxy's rules as the node's kernel holds them: the lines of
// `iptables-save` that belong to SVCP- chains, svcproxy's nftables table
// (`nft list table ip svcproxy`) when there is one, then the IPVS table of
// `ipvsadm -ln`, or a line saying the kernel has none. It returns what it wrote.
func (l *Lab) Rules(ctx context.Context) (string, error) {
	s, err := l.rules(ctx)
	if err != nil {
		return "", err
	}
	_, err = io.WriteString(l.cfg.Stdout, s)
	return s, err
}

// rules is what Rules writes.
func (l *Lab) rules(ctx context.Context) (string, error) {
	node := l.cfg.Plan.Node.Name
	var save, serr bytes.Buffer
	if err := l.net.Exec(ctx, node, []string{"iptables-save"}, nil, &save, &serr); err != nil {
		return "", fmt.Errorf("iptables-save in the node: %w: %s", err, strings.TrimSpace(serr.String()))
	}
	var b strings.Builder
	b.WriteString(FilterRules(save.String(), "SVCP-"))
	var nft, nerr bytes.Buffer
	if err := l.net.Exec(ctx, node, []string{"nft", "list", "table", "ip", "svcproxy"}, nil, &nft, &nerr); err == nil {
		b.WriteString("\n# nftables (nft list table ip svcproxy)\n")
		b.WriteString(nft.String())
	} else if _, lookErr := exec.LookPath("nft"); lookErr != nil {
		b.WriteString("\n# nftables: not shown, nft is not installed (Debian: apt-get install nftables).\n")
	} else {
		b.WriteString("\n# nftables: no table ip svcproxy (svcproxy runs no nftables path).\n")
	}
	var ipvs, ierr bytes.Buffer
	if err := l.net.Exec(ctx, node, []string{"ipvsadm", "-ln"}, nil, &ipvs, &ierr); err != nil {
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
