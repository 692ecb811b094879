package views

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/internal/nsenter"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	knft "github.com/svcproxy/svcproxy/kernel/nftables"
	"github.com/svcproxy/svcproxy/lab/topology"
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
func (v *Views) KernelCounters(ctx context.Context) (*KernelCounters, error) {
	kc := &KernelCounters{Ports: map[string]uint64{}, Endpoints: map[string]map[string]uint64{}}
	for i, save := range []string{"iptables-save", "ip6tables-save"} {
		out, err := v.net.NodeOutput(ctx, save, "-c", "-t", "nat")
		if err != nil {
			if i == 0 {
				return nil, err
			}
			continue // a node without IPv6 iptables: nothing counted there
		}
		if err := kc.addSave(out); err != nil {
			return nil, err
		}
	}
	for _, fam := range []knftables.Family{knftables.IPv4Family, knftables.IPv6Family} {
		counters, err := v.nftCounters(ctx, fam)
		if err != nil {
			continue // no table: svcproxy runs no nftables path
		}
		kc.addNFT(counters)
	}
	return kc, nil
}

// addSave counts the DNAT rules of iptables-save -c output's SVCP-SEP-
// chains: each one's comment names its service port.
func (kc *KernelCounters) addSave(save string) error {
	saved, err := kiptables.ParseSave(save)
	if err != nil {
		return err
	}
	for _, r := range saved.Lines {
		port := r.Option("--comment")
		if !r.Rule || r.Target() != "DNAT" || !strings.HasPrefix(r.Chain, "SVCP-SEP-") || port == "" || !r.Counted {
			continue
		}
		kc.Ports[port] += r.Packets
		if ep := r.Option("--to-destination"); ep != "" {
			if kc.Endpoints[port] == nil {
				kc.Endpoints[port] = map[string]uint64{}
			}
			kc.Endpoints[port][ep] += r.Packets
		}
	}
	return nil
}

// addNFT adds the named counters of svcproxy's nftables table
// ("connections-HASH-default/web/tcp/http") under their ports' names.
func (kc *KernelCounters) addNFT(counters []*knftables.Counter) {
	for _, c := range counters {
		if port, ok := counterPort(c.Name); ok && c.Packets != nil {
			kc.Ports[port] += *c.Packets
		}
	}
}

// nftCounters lists the named counters of svcproxy's table of family in the
// node, read over netlink by kernel/nftables (ListCounters), from a thread
// in the node's namespace.
// The Interface of each family is made once: making one runs nft three
// times, and `svclab web` reads the counters every second.
func (v *Views) nftCounters(ctx context.Context, fam knftables.Family) ([]*knftables.Counter, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	var counters []*knftables.Counter
	err := nsenter.Run(filepath.Join(topology.NetnsDir, v.net.NodeNamespace()), func() error {
		// nft runs from this thread, in the node's namespace.
		nft := v.nft[fam]
		if nft == nil {
			var err error
			if nft, err = knft.NewFamily(fam, "svcproxy"); err != nil {
				return err
			}
			v.nft[fam] = nft
		}
		var err error
		counters, err = nft.ListCounters(ctx)
		return err
	})
	return counters, err
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
