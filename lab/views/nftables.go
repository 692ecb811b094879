package views

import (
	"fmt"
	"strings"

	knft "github.com/svcproxy/svcproxy/kernel/nftables"

	"github.com/svcproxy/svcproxy/service"
)

// The nftables part of `svclab rules SERVICE`: svcproxy's table as nft lists
// it, read back by kernel/nftables (ParseListing), narrowed to one Service.

// formatService writes the parts of the table a packet for svc meets: the
// verdict-map elements of svc, the base nat chains and the dispatch chain
// (services), and svc's own chains.
func formatService(t *knft.Listing, svc service.NamespacedName) string {
	prefix := svc.String() + ":"
	infix := "-" + svc.String() + "/"
	var b strings.Builder
	fmt.Fprintf(&b, "table %s %s {\n", t.Family, t.Name)
	for _, m := range t.Maps {
		var elems []string
		for _, e := range m.Elements {
			if strings.HasPrefix(e.Comment, prefix) || strings.Contains(e.Value, infix) {
				el := strings.Join(e.Key, " . ")
				if e.Comment != "" {
					el += fmt.Sprintf(" comment %q", e.Comment)
				}
				elems = append(elems, el+" : "+e.Value)
			}
		}
		if len(elems) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\tmap %s {\n\t\ttype %s\n\t\telements = { %s }\n\t}\n\n", m.Name, m.Type,
			strings.Join(elems, ",\n\t\t\t     "))
	}
	for _, c := range t.Chains {
		if !(c.Type == "nat" || c.Name == "services" || strings.Contains(c.Name, infix)) {
			continue
		}
		fmt.Fprintf(&b, "\tchain %s {\n", c.Name)
		if c.Hook != "" {
			fmt.Fprintf(&b, "\t\ttype %s hook %s priority %s;\n", c.Type, c.Hook, c.Priority)
		}
		for _, r := range c.Rules {
			b.WriteString("\t\t" + r + "\n")
		}
		b.WriteString("\t}\n\n")
	}
	b.WriteString("}\n")
	return b.String()
}
