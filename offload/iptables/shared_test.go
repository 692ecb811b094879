package iptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/offloadtest"
	"github.com/svcproxy/svcproxy/internal/ruletest"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/offload/kernelsync"
	"github.com/svcproxy/svcproxy/service"
)

// What iptables mode answers alike with nftables mode: internal/ruletest's
// tables, through the Fake and its packet tracer (kernel/iptables), and on
// the real kernel. The rest of this package's tests are iptables' own.
func TestShared(t *testing.T) {
	ruletest.Run(t, ruletest.Suite{
		Path: rules,
		Render: func(n dataplane.Node, snap *service.Snapshot) ([]byte, error) {
			return Render(Config{Node: n}, snap)
		},
		Rendered: "as iptables-restore reads it",
		// A ClusterIP's other ports are iptables' own: no rule matches
		// them, and they pass.
		TraceCases: []ruletest.TraceCase{
			{Name: "not a service port", Packet: ruletest.From(ruletest.OutsideIP, "198.18.0.10:81", 0), Want: "ACCEPT"},
			{Name: "TCP to a UDP port", Packet: ruletest.From(ruletest.PodIP, "198.18.0.53:53", 0), Want: "ACCEPT"},
		},
	})
}

// The real-kernel checks: the rules applied with iptables-restore in a node
// namespace, real sockets in client and backend namespaces. They need root.
func TestKernelShared(t *testing.T) { ruletest.RunKernel(t, kernelRules) }

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
	f.Now = o.Now // the clock of the recent lists (ClientIP affinity)
	r := &rig{ipt: &countingIPT{Fake: f, counts: map[string]uint64{}}, o: o}
	r.Restart(t)
	return r
}

// rig is a Dataplane on a countingIPT.
type rig struct {
	ipt *countingIPT
	o   ruletest.Options
	*Dataplane
}

func (r *rig) Restart(t *testing.T) {
	t.Helper()
	d, err := New(Config{Node: r.o.Node(false), CountConnections: r.o.CountConnections, Periods: r.o.Periods(false), IPTables: r.ipt})
	if err != nil {
		t.Fatal(err)
	}
	r.Dataplane = d
}

func (r *rig) Health() kernelsync.Health { return r.Dataplane.Health().Health }
func (r *rig) Dump() string              { return r.ipt.Dump() }
func (r *rig) Writes() int               { n, _ := r.ipt.Restores(); return n }

func (r *rig) FailNext() string {
	r.ipt.mu.Lock()
	defer r.ipt.mu.Unlock()
	r.ipt.fail++
	return failedRestore
}

// Hit counts n packets on each SVCP-SEP- chain of port's DNAT rules.
func (r *rig) Hit(t *testing.T, port service.PortName, n uint64) {
	chains := appliedChains(r.Dataplane, port)
	r.ipt.mu.Lock()
	defer r.ipt.mu.Unlock()
	for _, ch := range chains {
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
	return ruletest.Traces(trs, err, trace)
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
// declares a chain (":NAME - [0:0]") starts its counters again at 0. Its
// next fail restores fail (rig.FailNext).
type countingIPT struct {
	*kiptables.Fake
	mu     sync.Mutex
	counts map[string]uint64
	fail   int
}

// failedRestore is what a restore of countingIPT says when it fails.
const failedRestore = "iptables-restore: line 7 failed"

var declared = regexp.MustCompile(`(?m)^:(SVCP-[A-Z]+-[A-Z0-9]+) - \[0:0\]$`)

func (c *countingIPT) Restore(ctx context.Context, rules []byte) error {
	c.mu.Lock()
	fail := c.fail > 0
	if fail {
		c.fail--
	}
	c.mu.Unlock()
	if fail {
		return errors.New(failedRestore)
	}
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

// kernelRules is iptables mode on the real kernel, as the checks it shares
// with nftables mode drive it (internal/ruletest): its Dataplane's
// iptables-restore in the node namespace of an offloadtest.Lab.
var kernelRules ruletest.KernelPath = kernelPath{}

type kernelPath struct{}

func (kernelPath) Require(t *testing.T, family service.Family) {
	t.Helper()
	netnstest.RequireRoot(t, "iptables", "iptables-restore", "iptables-save", "sysctl")
	if family == service.IPv6 {
		if _, err := kiptables.New(kiptables.Config{Family: kiptables.IPv6}); err != nil {
			t.Skipf("needs ip6tables: %v", err)
		}
	}
}

// ipt is the node's iptables (ip6tables) of family.
func (kernelPath) ipt(t *testing.T, family service.Family) kiptables.Interface {
	t.Helper()
	cfg := kiptables.Config{}
	if family != "" {
		cfg.Family = kiptables.Family(family)
	}
	ipt, err := kiptables.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return ipt
}

func (k kernelPath) New(t *testing.T, l *offloadtest.Lab, o ruletest.Options) ruletest.KernelRig {
	t.Helper()
	d, err := New(Config{Node: o.Node(true), CountConnections: o.CountConnections, Periods: o.Periods(true), IPTables: k.ipt(t, o.Family)})
	if err != nil {
		t.Fatal(err)
	}
	return kernelRig{d}
}

func (k kernelPath) Cleanup(t *testing.T, l *offloadtest.Lab, family service.Family) {
	t.Helper()
	ipt := k.ipt(t, family)
	if err := l.Node.Do(func() error { return Cleanup(context.Background(), ipt) }); err != nil {
		t.Fatal(err)
	}
}

func (kernelPath) Ours(t *testing.T, l *offloadtest.Lab, family service.Family) string {
	save := "iptables-save"
	if family == service.IPv6 {
		save = "ip6tables-save"
	}
	if out := l.Node.Run(t, save); strings.Contains(out, "SVCP") {
		return out
	}
	return ""
}

func (kernelPath) List(t *testing.T, l *offloadtest.Lab) string {
	return l.Node.Run(t, "iptables-save", "-c")
}

// kernelRig is a Dataplane on the real kernel.
type kernelRig struct{ *Dataplane }

func (r kernelRig) Health() kernelsync.Health { return r.Dataplane.Health().Health }
