package nftables

import (
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/offloadtest"
)

// Another program deletes or flushes the table: the next periodic check (the
// Dataplane's resync, every SyncPeriod) notices, and that sync is full and
// writes the table again; traffic to the Service flows once more. The test
// waits for the repair in the sync record, never for a time.
func TestKernelLostTableRepaired(t *testing.T) {
	l := newLab(t)
	l.ServeTCP(t, 8080)
	cfg := l.cfg
	cfg.NFT, cfg.SyncPeriod, cfg.LagBound = l.nft(t), 100*time.Millisecond, time.Hour
	dp, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l.RunOnNode(t, dp, l.Web())
	waitHealth(t, dp, "the first sync", func(h Health) bool { return h.FullSyncs == 1 })
	if _, err := offloadtest.Dial(l.Client, "198.18.0.10:80", 3); err != nil {
		t.Fatal(err)
	}
	for i, lose := range []string{"flush", "delete"} {
		waitPartial(t, dp) // intact: the periodic syncs are partial
		l.Node.Run(t, "nft", lose, "table", "ip", Table)
		waitHealth(t, dp, "the repair after `nft "+lose+" table`", func(h Health) bool {
			return h.Repairs == uint64(i+1) && h.FullSyncs == uint64(i+2)
		})
		if _, err := offloadtest.Dial(l.Client, "198.18.0.10:80", 3); err != nil {
			t.Errorf("after nft %s table and the repair: %v\n%s", lose, err, l.Node.Run(t, "nft", "list", "table", "ip", Table))
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
