package iptables

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/offloadtest"
	"github.com/svcproxy/svcproxy/internal/ruletest"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// iptables' own real-kernel tests; the checks it shares with nftables mode
// are TestKernelShared's (internal/ruletest).

// Another program resets the tables (a firewall reload: iptables-restore
// without --noflush flushes each table it is given and deletes its chains),
// or deletes the canaries: the next periodic check of the canary in mangle
// notices, and that sync puts everything back. (A nat table flushed or reset
// alone leaves mangle's canary, and goes unnoticed, as in kube-proxy.)
func TestKernelFlushedTableRepaired(t *testing.T) {
	restore := func(rules string) func(t *testing.T, l *offloadtest.Lab) {
		return func(t *testing.T, l *offloadtest.Lab) {
			cmd := l.Node.Command(context.Background(), "iptables-restore")
			cmd.Stdin = strings.NewReader(rules)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("iptables-restore: %v: %s", err, out)
			}
		}
	}
	ruletest.KernelRepaired(t, kernelRules,
		ruletest.Loss{Name: "every table reset", Do: restore("*mangle\nCOMMIT\n*nat\nCOMMIT\n*filter\nCOMMIT\n")},
		ruletest.Loss{Name: "the canaries deleted", Do: func(t *testing.T, l *offloadtest.Lab) {
			for _, table := range []string{tableMangle, tableNAT, tableFilter} {
				l.Node.Run(t, "iptables", "-t", table, "-X", chainCanary)
			}
		}},
	)
}

// Chains that belong to nothing any more are deleted in the same transaction that
// drops the jumps to them: by a partial sync (from what it applied) and by a new
// Dataplane's full sync (from iptables-save).
func TestKernelStaleChains(t *testing.T) {
	l := ruletest.NewLab(t, kernelRules)
	two := st.Snapshot(st.Service("web", "198.18.0.10", 80, l.Endpoints(8080), st.WithNodePort(30080)),
		st.Service("api", "198.18.0.20", 80, l.Endpoints(8080), st.WithAffinity(time.Minute)))
	p := l.Mode(t, ruletest.Options{})
	l.Sync(t, p, two)
	l.Sync(t, p, l.Web()) // partial: api goes, web loses its NodePort
	save := l.Node.Run(t, "iptables-save", "-t", "nat")
	if strings.Contains(save, "default/api") || strings.Contains(save, prefixEXT) {
		t.Errorf("after a partial sync, stale chains are left:\n%s", save)
	}
	l.Sync(t, l.Mode(t, ruletest.Options{}), two)           // restarted with both
	l.Sync(t, l.Mode(t, ruletest.Options{}), st.Snapshot()) // restarted with none: a full sync reads what is there
	save = l.Node.Run(t, "iptables-save", "-t", "nat")
	for _, prefix := range portChainPrefixes {
		if strings.Contains(save, prefix) {
			t.Errorf("after a full sync of nothing, %s chains are left:\n%s", prefix, save)
		}
	}
}

// The sync FullSyncPeriod after the last full one serves its change
// before the full sync's restore.
func TestKernelChangesBeforeFullSync(t *testing.T) {
	ruletest.KernelChangesBeforeFullSync(t, kernelRules, func(t *testing.T, l *ruletest.Lab, o ruletest.Options, before *func()) ruletest.KernelRig {
		ipt := &probedIPT{Interface: kernelRules.(kernelPath).ipt(t, o.Family), before: before}
		d, err := New(Config{Node: o.Node(true), Periods: o.Periods(true), IPTables: ipt})
		if err != nil {
			t.Fatal(err)
		}
		return kernelRig{d}
	})
}

// probedIPT calls *before, when set, as each restore begins.
type probedIPT struct {
	kiptables.Interface
	before *func()
}

func (p *probedIPT) Restore(ctx context.Context, rules []byte) error {
	if *p.before != nil {
		(*p.before)()
	}
	return p.Interface.Restore(ctx, rules)
}
