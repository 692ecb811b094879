package nftables

import (
	"context"
	"errors"
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
	f.Now = o.Now // the clock of the dynamic sets (ClientIP affinity)
	r := &rig{nft: f, failing: &failingNFT{Fake: f}, o: o}
	r.Restart(t)
	return r
}

// rig is a Dataplane on a Fake.
type rig struct {
	nft     *knft.Fake
	failing *failingNFT // nft, as the Dataplane writes to it
	o       ruletest.Options
	*Dataplane
}

func (r *rig) Restart(t *testing.T) {
	t.Helper()
	cfg := Config{Node: r.o.Node(false), CountConnections: r.o.CountConnections, NFT: r.failing}
	cfg.Conntrack, cfg.SyncPeriod, cfg.FullSyncPeriod, cfg.Now = r.o.Conntrack, r.o.SyncPeriod, r.o.FullSyncPeriod, r.o.Now
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.Dataplane = d
}

func (r *rig) Health() kernelsync.Health       { return r.Dataplane.Health().Health }
func (r *rig) Status() []kernelsync.PortStatus { return r.Ports() }
func (r *rig) Dump() string                    { return r.nft.Dump() }
func (r *rig) Writes() int                     { return r.nft.Runs() }
func (r *rig) FailNext() string                { r.failing.fail = true; return failedRun }

func (r *rig) Connections(ctx context.Context, ports map[service.PortName]bool) (map[service.PortName]uint64, error) {
	return r.Dataplane.Connections(ctx, nil, ports)
}

// failingNFT fails its next Run when fail is set.
type failingNFT struct {
	*knft.Fake
	fail bool
}

// failedRun is what a failed Run of failingNFT says.
const failedRun = "nft: Could not process rule: No buffer space available"

func (f *failingNFT) Run(ctx context.Context, tx *knftables.Transaction) error {
	if f.fail {
		f.fail = false
		return errors.New(failedRun)
	}
	return f.Fake.Run(ctx, tx)
}

// Hit adds n packets per endpoint to port's named counter, which every
// connection to the port meets once.
func (r *rig) Hit(t *testing.T, port service.PortName, n uint64) {
	po := appliedPort(r.Dataplane, port)
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
	return ruletest.Traces(trs, err, trace)
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
