package nftables

import (
	"context"
	"errors"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/offloadtest"
	"github.com/svcproxy/svcproxy/internal/ruletest"
	knft "github.com/svcproxy/svcproxy/kernel/nftables"
	"github.com/svcproxy/svcproxy/offload/kernelsync"
	"github.com/svcproxy/svcproxy/service"
)

// What nftables mode answers alike with iptables mode: internal/ruletest's
// tables, through the Fake and its packet tracer (kernel/nftables), and on
// the real kernel. The rest of this package's tests are nftables' own.
func TestShared(t *testing.T) {
	ruletest.Run(t, ruletest.Suite{
		Path: rules,
		Render: func(n dataplane.Node, snap *service.Snapshot) ([]byte, error) {
			text, err := Render(Config{Node: n}, snap)
			return []byte(text), err
		},
		Rendered: "the transaction as nft -f reads it",
		// nftables' own: a ClusterIP answers only on its ports, the
		// others are rejected.
		TraceCases: []ruletest.TraceCase{
			{Name: "not a service port", Packet: ruletest.From(ruletest.OutsideIP, "198.18.0.10:81", 0), Want: "REJECT"},
			{Name: "TCP to a UDP port", Packet: ruletest.From(ruletest.PodIP, "198.18.0.53:53", 0), Want: "REJECT"},
			{Name: "node to a ClusterIP's other port", Packet: ruletest.Local("198.18.0.10:81"), Want: "REJECT"},
		},
		// A partial sync leaves what a full one writes, and beside it only
		// the inert objects the next full sync deletes.
		Compare: partialLeftovers,
	})
}

// The real-kernel checks: the table applied with nft in a node namespace,
// real sockets in client and backend namespaces. They need root and nft.
// nftables also refuses a ClusterIP's other ports.
func TestKernelShared(t *testing.T) {
	ruletest.RunKernel(t, kernelRules,
		ruletest.Refusal{Name: "client, no such port", From: "client", Dst: "198.18.0.10:81"},
		ruletest.Refusal{Name: "node, no such port", From: "node", Dst: "198.18.0.10:81"},
	)
}

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
	d, err := New(Config{Node: r.o.Node(false), CountConnections: r.o.CountConnections, Periods: r.o.Periods(false), NFT: r.failing})
	if err != nil {
		t.Fatal(err)
	}
	r.Dataplane = d
}

func (r *rig) Health() kernelsync.Health { return r.Dataplane.Health().Health }
func (r *rig) Dump() string              { return r.nft.Dump() }
func (r *rig) Writes() int               { return r.nft.Runs() }
func (r *rig) FailNext() string          { r.failing.fail = true; return failedRun }

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

// kernelRules is nftables mode on the real kernel, as the checks it shares
// with iptables mode drive it (internal/ruletest): its Dataplane's nft in the
// node namespace of an offloadtest.Lab.
var kernelRules ruletest.KernelPath = kernelPath{}

type kernelPath struct{}

func (kernelPath) Require(t *testing.T, _ service.Family) {
	t.Helper()
	netnstest.RequireRoot(t, "nft", "sysctl")
}

// nft is the node's table of family.
func (kernelPath) nft(t *testing.T, l *offloadtest.Lab, family service.Family) knft.Interface {
	t.Helper()
	var nft knft.Interface
	if err := l.Node.Do(func() (err error) {
		nft, err = knft.NewFamily(TableFamily(family), Table)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return nft
}

func (k kernelPath) New(t *testing.T, l *offloadtest.Lab, o ruletest.Options) ruletest.KernelRig {
	t.Helper()
	d, err := New(Config{Node: o.Node(true), CountConnections: o.CountConnections, Periods: o.Periods(true), NFT: k.nft(t, l, o.Family)})
	if err != nil {
		t.Fatal(err)
	}
	return kernelRig{d}
}

func (k kernelPath) Cleanup(t *testing.T, l *offloadtest.Lab, family service.Family) {
	t.Helper()
	nft := k.nft(t, l, family)
	if err := l.Node.Do(func() error { return Cleanup(context.Background(), nft) }); err != nil {
		t.Fatal(err)
	}
}

func (kernelPath) Ours(t *testing.T, l *offloadtest.Lab, family service.Family) string {
	if out := l.Node.Run(t, "nft", "list", "tables"); strings.Contains(out, string(TableFamily(family))+" "+Table) {
		return out
	}
	return ""
}

func (kernelPath) List(t *testing.T, l *offloadtest.Lab) string {
	return l.Node.Run(t, "nft", "list", "table", "ip", Table)
}

// kernelRig is a Dataplane on the real kernel.
type kernelRig struct{ *Dataplane }

func (r kernelRig) Health() kernelsync.Health { return r.Dataplane.Health().Health }
