package views

import (
	"context"
	"fmt"
	"strings"

	"github.com/svcproxy/svcproxy/service"
)

// kubeProxyRules writes the real kube-proxy's rules, when the node has any
// (the kubeadm cluster, `svclab up --nodes N`): its KUBE- chains in
// iptables-save, and its nftables table (nft list table ip kube-proxy).
// They are kube-proxy's layout, not svcproxy's, so they are shown as the
// kernel holds them, whole, without a legend; with svc, only the lines
// that name the Service ("default/web" is in each rule's comment).
func (v *Views) kubeProxyRules(ctx context.Context, b *strings.Builder, svc *service.Service, counters bool) error {
	save, err := v.net.NodeOutput(ctx, saveArgs("iptables-save", counters)...)
	if err != nil {
		return err
	}
	kube := FilterRules(save, "KUBE-")
	nft, nftErr := v.net.NodeOutput(ctx, "nft", "list", "table", "ip", "kube-proxy")
	if strings.HasPrefix(kube, "# no ") && nftErr != nil {
		return nil // no kube-proxy here
	}
	match := func(text string) string {
		if svc == nil {
			return text
		}
		name := svc.NamespacedName.String()
		var keep []string
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(line, "#") || strings.Contains(line, name) {
				keep = append(keep, line)
			}
		}
		return strings.Join(keep, "\n")
	}
	fmt.Fprintf(b, "\n# kube-proxy's rules on %s (iptables-save: KUBE- chains)\n", v.net.Plan().Node.Name)
	if !strings.HasPrefix(kube, "# no ") {
		b.WriteString(match(kube))
	} else {
		b.WriteString("# none in iptables\n")
	}
	if nftErr == nil {
		b.WriteString("\n# kube-proxy's nftables table (nft list table ip kube-proxy)\n")
		b.WriteString(match(nft))
	}
	return nil
}
