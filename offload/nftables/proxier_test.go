package nftables

import (
	"context"
	"errors"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"

	knft "github.com/svcproxy/svcproxy/kernel/nftables"
	"github.com/svcproxy/svcproxy/service"
)

// A partial sync writes only what the change touches: the changed port's chains,
// its elements, and the deletion of what it no longer needs. The golden files are
// the transactions, to be read.
func TestPartialSyncGolden(t *testing.T) {
	three := func(webEndpoints []service.Endpoint, opts ...svcOpt) *service.Snapshot {
		return snapshot(
			svc("web", "198.18.0.10", 80, webEndpoints, opts...),
			svc("api", "198.18.0.20", 443, threeEndpoints()),
			svc("db", "198.18.0.30", 5432, threeEndpoints()),
		)
	}
	tests := []struct {
		name string
		next *service.Snapshot
	}{
		{"partial-endpoint-removed", three(threeEndpoints()[:2])},
		{"partial-no-endpoints", three(nil)},
		{"partial-service-removed", snapshot(svc("api", "198.18.0.20", 443, threeEndpoints()), svc("db", "198.18.0.30", 5432, threeEndpoints()))},
		{"partial-nodeport-added", three(threeEndpoints(), withNodePort(30080))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := knft.NewFake(Table)
			p, err := NewProxier(ProxierConfig{Rules: testConfig, NFT: f})
			if err != nil {
				t.Fatal(err)
			}
			p.Update(three(threeEndpoints()))
			if err := p.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
			p.Update(tt.next)
			if err := p.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
			if h := p.Health(); h.PartialSyncs != 1 {
				t.Fatalf("health %+v: want a partial sync", h)
			}
			text := f.LastTransaction.String()
			for _, other := range []string{"default/api", "default/db", "chain ip svcproxy services"} {
				if strings.Contains(text, other) {
					t.Errorf("the partial sync touches %s:\n%s", other, text)
				}
			}
			checkGolden(t, tt.name, []byte(text))
			// The result is what a full sync of the new state would have made.
			want := syncedFake(t, testConfig, tt.next).Dump()
			if got := f.Dump(); got != want {
				t.Errorf("after the partial sync:\n%s\nwant (a full sync):\n%s", got, want)
			}
		})
	}
}

// A sync with nothing changed sends nothing.
func TestPartialSyncNothing(t *testing.T) {
	f := knft.NewFake(Table)
	p, _ := NewProxier(ProxierConfig{Rules: testConfig, NFT: f})
	snap := snapshot(svc("web", "198.18.0.10", 80, threeEndpoints()))
	for range 3 {
		p.Update(snap)
		if err := p.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if f.Runs() != 1 {
		t.Errorf("%d transactions for one state, want 1", f.Runs())
	}
}

// failingNFT fails its next Run.
type failingNFT struct {
	*knft.Fake
	fail bool
}

func (f *failingNFT) Run(ctx context.Context, tx *knftables.Transaction) error {
	if f.fail {
		f.fail = false
		return errors.New("nft: Could not process rule: No buffer space available")
	}
	return f.Fake.Run(ctx, tx)
}

// After a failed sync the next one is full, and the health says what happened.
func TestFailureThenFullSync(t *testing.T) {
	f := &failingNFT{Fake: knft.NewFake(Table)}
	p, _ := NewProxier(ProxierConfig{Rules: testConfig, NFT: f})
	p.Update(snapshot(svc("web", "198.18.0.10", 80, threeEndpoints())))
	if err := p.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.fail = true
	p.Update(snapshot(svc("web", "198.18.0.10", 80, threeEndpoints()[:1])))
	if err := p.Sync(context.Background()); err == nil {
		t.Fatal("no error from a failed transaction")
	}
	if h := p.Health(); h.Healthy || h.ConsecutiveFailures != 1 || !strings.Contains(h.LastError, "No buffer space") {
		t.Errorf("health after a failure: %+v", h)
	}
	if err := p.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if h := p.Health(); !h.Healthy || h.FullSyncs != 2 {
		t.Errorf("health after the retry: %+v, want a second full sync", h)
	}
}

// Cleanup deletes the table, and finds nothing to do the second time.
func TestCleanup(t *testing.T) {
	f := syncedFake(t, testConfig, snapshot(svc("web", "198.18.0.10", 80, threeEndpoints())))
	for range 2 {
		if err := Cleanup(context.Background(), f); err != nil {
			t.Fatal(err)
		}
	}
	if d := f.Dump(); d != "" {
		t.Errorf("after Cleanup:\n%s", d)
	}
}
