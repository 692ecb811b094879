package nftables

import (
	"context"
	"net/netip"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/internal/ruletest"
	knft "github.com/svcproxy/svcproxy/kernel/nftables"
	"github.com/svcproxy/svcproxy/offload/kernelsync"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// The test cluster is servicetest's: this node st.ThisNode at 198.19.0.1, pods
// in 198.19.1.0/24, services in 198.18.0.0/16.
var testConfig = Config{
	Node: dataplane.Node{NodeName: st.ThisNode, ClusterCIDR: netip.MustParsePrefix("198.19.1.0/24")},
}

// labPort is the port of st.Service("web", ...).
var labPort = service.PortName{NamespacedName: service.NamespacedName{Namespace: "default", Name: "web"}, Port: "p", Protocol: service.TCP}

// rules is nftables mode as the tables it shares with iptables mode drive it
// (internal/ruletest): a Dataplane on a Fake of the family's table.
var rules ruletest.Path = rulesPath{}

type rulesPath struct{}

func (rulesPath) New(t *testing.T, o ruletest.Options) ruletest.Rig {
	f, local := knft.NewFake(Table), ruletest.NodeIP
	if o.Family == service.IPv6 {
		f, local = knft.NewFakeFamily(TableFamily(service.IPv6), Table), ruletest.NodeIP6
	}
	f.SetLocalAddrs(local)
	r := &rig{nft: f, o: o}
	r.Restart(t)
	return r
}

// rig is a Dataplane on a Fake, as the shared tables drive it: Update hands
// a Snapshot over, Sync applies it (the Syncer's Sync) if there is one.
type rig struct {
	nft  *knft.Fake
	o    ruletest.Options
	d    *Dataplane
	snap *service.Snapshot
}

func (r *rig) Restart(t *testing.T) {
	t.Helper()
	cfg := Config{Node: dataplane.Node{Family: r.o.Family, NodeName: st.ThisNode, ClusterCIDR: ruletest.ClusterCIDR(r.o.Family), NodeIP: r.o.NodeIP},
		CountConnections: r.o.CountConnections}
	cfg.NFT, cfg.Conntrack, cfg.SyncPeriod, cfg.FullSyncPeriod, cfg.Now = r.nft, r.o.Conntrack, r.o.SyncPeriod, r.o.FullSyncPeriod, r.o.Now
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
func (r *rig) Dump() string                    { return r.nft.Dump() }

func (r *rig) Connections(ctx context.Context, ports map[service.PortName]bool) (map[service.PortName]uint64, error) {
	return r.d.Connections(ctx, nil, ports)
}

// Hit adds n packets per endpoint to port's named counter, which every
// connection to the port meets once.
func (r *rig) Hit(t *testing.T, port service.PortName, n uint64) {
	po := appliedPort(r.d, port)
	c := r.nft.Table.Counters[po.counter]
	if c == nil {
		t.Fatalf("%s has no counter %q", port, po.counter)
	}
	endpoints := map[string]bool{}
	for _, e := range po.status.Endpoints {
		endpoints[e.Addr] = true
	}
	had := uint64(0) // knftables' Fake adds a counter without packets
	if c.Packets != nil {
		had = *c.Packets
	}
	c.Packets = knftables.PtrTo(had + n*uint64(len(endpoints)))
}

func (r *rig) Trace(p ruletest.Packet) (ruletest.Trace, error) {
	tr, err := r.nft.Trace(packet(p))
	return trace(tr), err
}

func (r *rig) TraceAll(p ruletest.Packet) ([]ruletest.Trace, error) {
	trs, err := r.nft.TraceAll(packet(p))
	out := make([]ruletest.Trace, len(trs))
	for i, tr := range trs {
		out[i] = trace(tr)
	}
	return out, err
}

func packet(p ruletest.Packet) knft.Packet {
	return knft.Packet{Proto: p.Proto, Src: p.Src, Dst: p.Dst, Local: p.Local, Pick: p.Pick}
}

func trace(tr knft.Trace) ruletest.Trace {
	return ruletest.Trace{Verdict: tr.Verdict, DNAT: tr.DNAT, Masquerade: tr.Masquerade, Delivered: tr.Delivered,
		Probability: tr.Probability, Result: tr.Result(), Text: tr.String()}
}

// appliedPort is port's objects as the last sync applied them.
func appliedPort(d *Dataplane, port service.PortName) *portObjects {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, po := range d.ports {
		if po.name == port {
			return po
		}
	}
	return nil
}
