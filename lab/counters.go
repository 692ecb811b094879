package lab

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// KernelCounters are the new connections the node's kernel counted per
// service port, read as `svclab rules --counters` reads them: iptables-save
// -c (and ip6tables-save -c), where each SVCP-SEP- chain's DNAT rule counts
// the connections it sent to its endpoint (nat rules see only a
// connection's first packet), and svcproxy's nftables table, where hybrid
// gives each promoted port a named counter ("connections-...") that its
// DNAT rules update. Where the kernel counts nothing (nftables mode without
// those counters, IPVS), a port has no entry.
type KernelCounters struct {
	// Ports are by service port name, as /status names them
	// ("default/web:http", "default/echo:echo/UDP").
	Ports map[string]uint64 `json:"ports"`
	// Endpoints are iptables' per endpoint: Endpoints["default/web:http"]
	// ["198.19.1.10:8080"].
	Endpoints map[string]map[string]uint64 `json:"endpoints"`
}

// KernelCounters reads the kernel's connection counters in the node.
func (l *Lab) KernelCounters(ctx context.Context) (*KernelCounters, error) {
	kc := &KernelCounters{Ports: map[string]uint64{}, Endpoints: map[string]map[string]uint64{}}
	for i, save := range []string{"iptables-save", "ip6tables-save"} {
		out, err := l.net.NodeOutput(ctx, save, "-c", "-t", "nat")
		if err != nil {
			if i == 0 {
				return nil, err
			}
			continue // a node without IPv6 iptables: nothing counted there
		}
		kc.addSave(out)
	}
	for _, fam := range []string{"ip", "ip6"} {
		out, err := l.net.NodeOutput(ctx, "nft", "list", "table", fam, "svcproxy")
		if err != nil {
			continue // no table: svcproxy runs no nftables path
		}
		tab, err := parseNFTList(out)
		if err != nil {
			return nil, err
		}
		kc.addNFT(tab)
	}
	return kc, nil
}

// addSave counts the DNAT rules of iptables-save -c output's SVCP-SEP-
// chains: each one's comment names its service port.
func (kc *KernelCounters) addSave(save string) {
	for _, r := range parseSave(save).lines {
		if !r.rule || r.target != "DNAT" || !strings.HasPrefix(r.chain, "SVCP-SEP-") || r.comment == "" {
			continue
		}
		n, err := strconv.ParseUint(r.packets, 10, 64)
		if err != nil {
			continue
		}
		kc.Ports[r.comment] += n
		if m := dnatRE.FindStringSubmatch(r.text); m != nil {
			if kc.Endpoints[r.comment] == nil {
				kc.Endpoints[r.comment] = map[string]uint64{}
			}
			kc.Endpoints[r.comment][m[1]] += n
		}
	}
}

// addNFT adds the named counters of svcproxy's nftables table
// ("connections-HASH-default/web/tcp/http") under their ports' names.
func (kc *KernelCounters) addNFT(tab *nftTable) {
	for name, n := range tab.Packets {
		if port, ok := counterPort(name); ok {
			kc.Ports[port] += n
		}
	}
}

// counterPort is the service port name of an nftables connection counter:
// "connections-HASH-default/echo/udp/echo" is "default/echo:echo/UDP", as
// service.PortName prints it.
func counterPort(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, "connections-")
	if !ok {
		return "", false
	}
	_, base, ok := strings.Cut(rest, "-")
	if !ok {
		return "", false
	}
	f := strings.Split(base, "/")
	if len(f) != 4 {
		return "", false
	}
	s := fmt.Sprintf("%s/%s:%s", f[0], f[1], f[3])
	if proto := strings.ToUpper(f[2]); proto != "TCP" {
		s += "/" + proto
	}
	return s, true
}
