package nftables

import (
	"context"
	"iter"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/internal/offloadtest"
	"github.com/svcproxy/svcproxy/internal/ruletest"
	knft "github.com/svcproxy/svcproxy/kernel/nftables"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// nftables' own real-kernel tests; the checks it shares with iptables mode
// are TestKernelShared's (internal/ruletest).

// Another program deletes or flushes the table: the next periodic check
// notices, and that sync writes the table again.
func TestKernelLostTableRepaired(t *testing.T) {
	var losses []ruletest.Loss
	for _, lose := range []string{"flush", "delete"} {
		losses = append(losses, ruletest.Loss{Name: "`nft " + lose + " table`", Do: func(t *testing.T, l *offloadtest.Lab) {
			l.Node.Run(t, "nft", lose, "table", "ip", Table)
		}})
	}
	ruletest.KernelRepaired(t, kernelRules, losses...)
}

// A partial sync writes only the changed port's objects; the others keep working.
func TestKernelPartialSync(t *testing.T) {
	l := ruletest.NewLab(t, kernelRules)
	l.ServeTCP(t, 8080)
	p := l.Mode(t, ruletest.Options{})
	many := func(webEndpoints []service.Endpoint) *service.Snapshot {
		svcs := []*service.Service{st.Service("web", "198.18.0.10", 80, webEndpoints)}
		for i := range 50 {
			ip := "198.18.1." + itoa(i+1)
			svcs = append(svcs, st.Service("other-"+itoa(i), ip, 80, l.Endpoints(8080)))
		}
		return st.Snapshot(svcs...)
	}
	l.Sync(t, p, many(l.Endpoints(8080)))
	full := p.Health().Size // operations
	l.Sync(t, p, many(l.Endpoints(8080)[:1]))
	h := p.Health()
	if h.PartialSyncs != 1 || h.Size*10 > full {
		t.Errorf("one service changed: %d operations (full sync: %d), health %+v: want a small partial sync", h.Size, full, h)
	}
	answers, err := offloadtest.Dial(l.Client, "198.18.0.10:80", 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range answers {
		if a.Backend != "b0" {
			t.Errorf("after the change web has one endpoint, b0; %s answered", a.Backend)
		}
	}
	if _, err := offloadtest.Dial(l.Client, "198.18.1.50:80", 3); err != nil {
		t.Errorf("an unchanged service: %v", err)
	}
	// The removed endpoints' chains are emptied, and nothing leads to them; the
	// next full sync deletes them (see partialTx).
	table := l.Node.Run(t, "nft", "list", "table", "ip", Table)
	for _, gone := range []string{"default/web/tcp/p__198.19.12.2/8080", "default/web/tcp/p__198.19.13.2/8080"} {
		requireInert(t, table, gone)
	}
}

// requireInert fails unless every line of the table listing that names marker
// declares an object (a chain, set or counter) that nothing else names, and each
// such chain is empty: what a partial sync leaves for the next full sync to delete.
func requireInert(t *testing.T, table, marker string) {
	t.Helper()
	lines := strings.Split(table, "\n")
	for i, l := range lines {
		if !strings.Contains(l, marker) {
			continue
		}
		f := strings.Fields(l)
		switch {
		case len(f) == 3 && f[0] == "chain" && f[2] == "{" && i+1 < len(lines) && strings.TrimSpace(lines[i+1]) == "}":
		case len(f) == 3 && (f[0] == "set" || f[0] == "counter") && f[2] == "{":
		default:
			t.Errorf("%s is still in use: %q\n%s", marker, l, table)
		}
	}
}

// Chains and sets that belong to nothing any more: a partial sync empties them and
// drops every reference to them (from what it applied); a full sync deletes them
// (from what it finds in the kernel's table), also those an earlier process left.
func TestKernelStaleChains(t *testing.T) {
	l := ruletest.NewLab(t, kernelRules)
	two := st.Snapshot(st.Service("web", "198.18.0.10", 80, l.Endpoints(8080), st.WithNodePort(30080)),
		st.Service("api", "198.18.0.20", 80, l.Endpoints(8080), st.WithAffinity(time.Minute)))
	p := l.Mode(t, ruletest.Options{})
	l.Sync(t, p, two)
	l.Sync(t, p, l.Web()) // partial: api goes, web loses its NodePort
	table := l.Node.Run(t, "nft", "list", "table", "ip", Table)
	requireInert(t, table, "default/api") // emptied by the partial sync
	requireInert(t, table, prefixExternal)
	l.Sync(t, l.Mode(t, ruletest.Options{}), l.Web()) // restarted: a full sync deletes them
	table = l.Node.Run(t, "nft", "list", "table", "ip", Table)
	if strings.Contains(table, "default/api") || strings.Contains(table, prefixExternal) {
		t.Errorf("after a full sync, stale objects are left:\n%s", table)
	}
	l.Sync(t, l.Mode(t, ruletest.Options{}), two)           // restarted with both
	l.Sync(t, l.Mode(t, ruletest.Options{}), st.Snapshot()) // restarted with none: a full sync reads what is there
	table = l.Node.Run(t, "nft", "list", "table", "ip", Table)
	for _, prefix := range append(portChainPrefixes, prefixAffinity) {
		if regexp.MustCompile(prefix + `[A-Z2-7]{8}-`).MatchString(table) {
			t.Errorf("after a full sync of nothing, %s objects are left:\n%s", prefix, table)
		}
	}
}

// The sync FullSyncPeriod after the last full one serves its change
// before the full sync's transaction is written.
func TestKernelChangesBeforeFullSync(t *testing.T) {
	ruletest.KernelChangesBeforeFullSync(t, kernelRules, func(t *testing.T, l *ruletest.Lab, o ruletest.Options, before *func()) ruletest.KernelRig {
		nft := &probedNFT{Interface: kernelRules.(kernelPath).nft(t, l.Lab, o.Family), before: before}
		d, err := New(Config{Node: o.Node(true), Periods: o.Periods(true), NFT: nft})
		if err != nil {
			t.Fatal(err)
		}
		return kernelRig{d}
	})
}

// probedNFT calls *before, when set, as each transaction begins: Run (a
// partial sync's) and RunParts (a full sync's).
type probedNFT struct {
	knft.Interface
	before *func()
}

func (n *probedNFT) Run(ctx context.Context, tx *knftables.Transaction) error {
	if *n.before != nil {
		(*n.before)()
	}
	return n.Interface.Run(ctx, tx)
}

func (n *probedNFT) RunParts(ctx context.Context, parts iter.Seq[func(*knftables.Transaction)]) (int, error) {
	if *n.before != nil {
		(*n.before)()
	}
	return n.Interface.RunParts(ctx, parts)
}
