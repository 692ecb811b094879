package iptables

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"sync"
	"testing"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/internal/ruletest"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/offload/kernelsync"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// The test cluster is servicetest's: this node st.ThisNode at 198.19.0.1, pods
// in 198.19.1.0/24, services in 198.18.0.0/16.
var testConfig = Config{
	Node: dataplane.Node{NodeName: st.ThisNode, ClusterCIDR: netip.MustParsePrefix("198.19.1.0/24")},
}

// rules is iptables mode as the tables it shares with nftables mode drive it
// (internal/ruletest): a Dataplane on a Fake that counts packets.
var rules ruletest.Path = rulesPath{}

type rulesPath struct{}

func (rulesPath) New(t *testing.T, o ruletest.Options) ruletest.Rig {
	f, local := kiptables.NewFake(), ruletest.NodeIP
	if o.Family == service.IPv6 {
		f, local = kiptables.NewFakeFamily(kiptables.IPv6), ruletest.NodeIP6
	}
	f.SetLocalAddrs(local)
	r := &rig{ipt: &countingIPT{Fake: f, counts: map[string]uint64{}}, o: o}
	r.Restart(t)
	return r
}

// rig is a Dataplane on a countingIPT, as the shared tables drive it: Update
// hands a Snapshot over, Sync applies it (the Syncer's Sync) if there is one.
type rig struct {
	ipt  *countingIPT
	o    ruletest.Options
	d    *Dataplane
	snap *service.Snapshot
}

func (r *rig) Restart(t *testing.T) {
	t.Helper()
	cfg := Config{Node: dataplane.Node{Family: r.o.Family, NodeName: st.ThisNode, ClusterCIDR: ruletest.ClusterCIDR(r.o.Family), NodeIP: r.o.NodeIP}}
	cfg.IPTables, cfg.Conntrack, cfg.CountConnections, cfg.SyncPeriod, cfg.FullSyncPeriod, cfg.Now = r.ipt, r.o.Conntrack, r.o.CountConnections, r.o.SyncPeriod, r.o.FullSyncPeriod, r.o.Now
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.d, r.snap = d, nil
}

func (r *rig) Update(snap *service.Snapshot) { r.snap = snap }

func (r *rig) Sync(ctx context.Context) error {
	if r.snap == nil {
		return nil
	}
	return r.d.Sync(ctx, r.snap)
}

func (r *rig) Health() kernelsync.Health       { return r.d.Health().Health }
func (r *rig) Status() []kernelsync.PortStatus { return r.d.Ports() }
func (r *rig) Dump() string                    { return r.ipt.Dump() }

func (r *rig) Connections(ctx context.Context, ports map[service.PortName]bool) (map[service.PortName]uint64, error) {
	return r.d.Connections(ctx, nil, ports)
}

// Hit counts n packets on each SVCP-SEP- chain of port's DNAT rules.
func (r *rig) Hit(t *testing.T, port service.PortName, n uint64) {
	r.ipt.mu.Lock()
	defer r.ipt.mu.Unlock()
	for _, ch := range appliedChains(r.d, port) {
		if ch[:9] == "SVCP-SEP-" {
			r.ipt.counts[ch] += n
		}
	}
}

func (r *rig) Trace(p ruletest.Packet) (ruletest.Trace, error) {
	tr, err := r.ipt.Trace(packet(p))
	return trace(tr), err
}

func (r *rig) TraceAll(p ruletest.Packet) ([]ruletest.Trace, error) {
	trs, err := r.ipt.TraceAll(packet(p))
	out := make([]ruletest.Trace, len(trs))
	for i, tr := range trs {
		out[i] = trace(tr)
	}
	return out, err
}

// packet is p for the tracer: a packet from outside arrives on eth0.
func packet(p ruletest.Packet) kiptables.Packet {
	pkt := kiptables.Packet{Proto: p.Proto, Src: p.Src, Dst: p.Dst, Local: p.Local, Pick: p.Pick}
	if !p.Local {
		pkt.InIface = "eth0"
	}
	return pkt
}

func trace(tr kiptables.Trace) ruletest.Trace {
	return ruletest.Trace{Verdict: tr.Verdict, DNAT: tr.DNAT, Masquerade: tr.Masquerade, Delivered: tr.Delivered,
		Probability: tr.Probability, Result: tr.Result(), Text: tr.String()}
}

// appliedChains are the nat chains of port as the last sync applied them.
func appliedChains(d *Dataplane, port service.PortName) []string {
	for _, ps := range d.Ports() {
		if ps.Port == port.String() {
			return ps.Chains
		}
	}
	return nil
}

// countingIPT is a Fake that counts packets per chain as the kernel does: a
// chain's DNAT rules show the packets added with rig.Hit, and a restore that
// declares a chain (":NAME - [0:0]") starts its counters again at 0.
type countingIPT struct {
	*kiptables.Fake
	mu     sync.Mutex
	counts map[string]uint64
}

var declared = regexp.MustCompile(`(?m)^:(SVCP-[A-Z]+-[A-Z0-9]+) - \[0:0\]$`)

func (c *countingIPT) Restore(ctx context.Context, rules []byte) error {
	if err := c.Fake.Restore(ctx, rules); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range declared.FindAllSubmatch(rules, -1) {
		delete(c.counts, string(m[1]))
	}
	return nil
}

func (c *countingIPT) SaveCounters(ctx context.Context, t kiptables.Table) ([]byte, error) {
	save, err := c.Fake.SaveCounters(ctx, t)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for chain, n := range c.counts {
		save = bytes.ReplaceAll(save, []byte("[0:0] -A "+chain+" "), []byte(fmt.Sprintf("[%d:0] -A %s ", n, chain)))
	}
	return save, nil
}
