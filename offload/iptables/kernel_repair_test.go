package iptables

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/offloadtest"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
)

// Another program flushes the nat table, or flushes and deletes every chain of
// nat and filter (a firewall reload): the next periodic check of the hooks (the
// Dataplane's resync, every SyncPeriod) notices, and that sync is full and
// writes everything again; traffic to the Service flows once more. The test
// waits for the repair in the sync record, never for a time.
func TestKernelFlushedTableRepaired(t *testing.T) {
	l := newLab(t)
	l.ServeTCP(t, 8080)
	ipt, err := kiptables.New(kiptables.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := l.cfg
	cfg.IPTables, cfg.SyncPeriod, cfg.LagBound = ipt, 100*time.Millisecond, time.Hour
	dp, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l.RunOnNode(t, dp, l.Web())
	waitHealth(t, dp, "the first sync", func(h Health) bool { return h.FullSyncs == 1 })
	if _, err := offloadtest.Dial(l.Client, "198.18.0.10:80", 3); err != nil {
		t.Fatal(err)
	}
	for i, lose := range []struct{ what, restore string }{
		{"the nat table flushed", "*nat\n-F\nCOMMIT\n"},
		// iptables-restore without --noflush empties each table it is given
		// and deletes its chains: a firewall reload.
		{"nat and filter reset", "*nat\nCOMMIT\n*filter\nCOMMIT\n"},
	} {
		waitPartial(t, dp) // intact: the periodic syncs are partial
		cmd := l.Node.Command(context.Background(), "iptables-restore")
		cmd.Stdin = strings.NewReader(lose.restore)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("iptables-restore: %v: %s", err, out)
		}
		waitHealth(t, dp, "the repair after "+lose.what, func(h Health) bool {
			return h.Repairs == uint64(i+1) && h.FullSyncs == uint64(i+2)
		})
		if _, err := offloadtest.Dial(l.Client, "198.18.0.10:80", 3); err != nil {
			t.Errorf("after %s and the repair: %v\n%s", lose.what, err, l.Node.Run(t, "iptables-save"))
		}
	}
}

// waitPartial waits for the next partial sync.
func waitPartial(t *testing.T, dp *Dataplane) {
	t.Helper()
	n := dp.Health().PartialSyncs
	waitHealth(t, dp, "a partial sync", func(h Health) bool { return h.PartialSyncs > n })
}

// waitHealth waits until the sync record satisfies ok: the readiness signal of
// a sync that Run makes on its own. It gives up after a minute, which only a
// broken repair needs (a sync here takes milliseconds).
func waitHealth(t *testing.T, dp *Dataplane, what string, ok func(Health) bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !ok(dp.Health()) {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: health %+v", what, dp.Health())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
