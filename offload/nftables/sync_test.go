package nftables

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/knftables"

	knft "github.com/svcproxy/svcproxy/kernel/nftables"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// A partial sync writes only what the change touches: the changed port's chains,
// its elements, and the flush of what it no longer needs. The golden files are the
// transactions, to be read. The result is what a full sync of the new state makes,
// but for the emptied chains (and affinity sets, counters) a partial sync leaves
// for the next full sync to delete; after that full sync, it is exactly the same.
func TestPartialSyncGolden(t *testing.T) {
	three := func(webEndpoints []service.Endpoint, opts ...st.Opt) *service.Snapshot {
		return st.Snapshot(
			st.Service("web", "198.18.0.10", 80, webEndpoints, opts...),
			st.Service("api", "198.18.0.20", 443, st.ThreeEndpoints()),
			st.Service("db", "198.18.0.30", 5432, st.ThreeEndpoints()),
		)
	}
	replaced := append(st.ThreeEndpoints()[:2], st.Endpoint("198.19.1.12:8080", st.ThisNode))
	counting := testConfig
	counting.CountConnections = true
	tests := []struct {
		name       string
		cfg        Config
		prev, next *service.Snapshot
		// chainOnly: the transaction needs only nft's table cache (no delete,
		// elements only after their set's declaration, which kernel/nftables
		// writes as one block): a change of endpoints that keeps some.
		chainOnly bool
	}{
		{"partial-endpoint-removed", testConfig, three(st.ThreeEndpoints()), three(st.ThreeEndpoints()[:2]), true},
		{"partial-endpoint-replaced", testConfig, three(st.ThreeEndpoints()), three(replaced), true},
		{"partial-endpoint-replaced-affinity", testConfig, three(st.ThreeEndpoints(), st.WithAffinity(time.Hour)), three(replaced, st.WithAffinity(time.Hour)), true},
		{"partial-no-endpoints", testConfig, three(st.ThreeEndpoints()), three(nil), false},
		{"partial-service-removed", counting, three(st.ThreeEndpoints()), st.Snapshot(st.Service("api", "198.18.0.20", 443, st.ThreeEndpoints()), st.Service("db", "198.18.0.30", 5432, st.ThreeEndpoints())), false},
		{"partial-nodeport-added", testConfig, three(st.ThreeEndpoints()), three(st.ThreeEndpoints(), st.WithNodePort(30080)), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := knft.NewFake(Table)
			now := time.Unix(0, 0)
			cfg := tt.cfg
			cfg.NFT, cfg.Now = f, func() time.Time { return now }
			p, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Sync(context.Background(), tt.prev); err != nil {
				t.Fatal(err)
			}
			if err := p.Sync(context.Background(), tt.next); err != nil {
				t.Fatal(err)
			}
			if h := p.Health(); h.PartialSyncs != 1 {
				t.Fatalf("health %+v: want a partial sync", h)
			}
			text := f.LastTransaction.String()
			for _, other := range []string{"default/api", "default/db", "chain ip svcproxy services"} {
				if strings.Contains(text, other) && !strings.Contains(tt.name, "removed") {
					t.Errorf("the partial sync touches %s:\n%s", other, text)
				}
			}
			if tt.chainOnly {
				declared := "" // the set or map declared by the run of lines so far
				for _, l := range strings.Split(text, "\n") {
					f := strings.Fields(l)
					switch {
					case strings.HasPrefix(l, "delete "):
						t.Errorf("an endpoints change that needs nft's chain cache: %s", l)
					case len(f) > 4 && f[0] == "add" && (f[1] == "set" || f[1] == "map"):
						declared = f[4]
					case len(f) > 4 && f[0] == "add" && f[1] == "element" && f[4] == declared:
					case strings.HasPrefix(l, "add element "):
						t.Errorf("an element not after its set's declaration, which needs nft's chain cache: %s", l)
					default:
						declared = ""
					}
				}
			}
			checkGolden(t, tt.name, []byte(text))

			want := syncedFake(t, tt.cfg, tt.next).Dump()
			got := f.Dump()
			if left := leftovers(t, got, want); t.Failed() {
				t.Logf("after the partial sync:\n%s\nwant (a full sync):\n%s", got, want)
			} else if strings.Contains(tt.name, "affinity") && len(left) == 0 {
				// (Without affinity an endpoint has no chain, and its hairpin
				// element stays in use here: api and db have the same endpoints.)
				t.Errorf("an endpoint's chain went away, and none is left for the full sync to delete")
			}
			now = now.Add(time.Hour) // past the FullSyncPeriod: the next sync is full
			if err := p.Resync(context.Background()); err != nil {
				t.Fatal(err)
			}
			if h := p.Health(); h.FullSyncs != 2 {
				t.Fatalf("health %+v: want a second full sync", h)
			}
			if got := f.Dump(); got != want {
				t.Errorf("after the next full sync:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// leftovers checks that got (after a partial sync) is want (after a full sync) plus
// only what a partial sync leaves for the next full sync to delete: empty port
// chains, affinity sets and counters that nothing names, and hairpin elements of
// addresses that are no endpoint any more. It returns those lines.
func leftovers(t *testing.T, got, want string) []string {
	t.Helper()
	wantLines := map[string]bool{}
	for _, l := range strings.Split(want, "\n") {
		wantLines[l] = true
	}
	gotLines := map[string]bool{}
	var extra []string
	for _, l := range strings.Split(got, "\n") {
		gotLines[l] = true
		if !wantLines[l] {
			extra = append(extra, l)
		}
	}
	for l := range wantLines {
		if !gotLines[l] {
			t.Errorf("missing after the partial sync: %s", l)
		}
	}
	for _, l := range extra {
		f := strings.Fields(l)
		if len(f) == 10 && f[1] == "element" && f[4] == setHairpin {
			// add element ip svcproxy hairpin { E . E }: inert unless E is an endpoint
			if f[6] != f[8] || strings.Contains(want, "dnat to "+f[6]+":") {
				t.Errorf("left over hairpin element, and not a gone endpoint's: %s", l)
			}
			continue
		}
		if len(f) < 5 || f[0] != "add" || (f[1] != "chain" && f[1] != "set" && f[1] != "counter") {
			t.Errorf("left over, and not an inert object: %s", l)
			continue
		}
		name := f[4]
		if f[1] == "chain" && !isPortChain(name) || f[1] == "set" && !strings.HasPrefix(name, prefixAffinity) ||
			f[1] == "counter" && !strings.HasPrefix(name, prefixCounter) {
			t.Errorf("left over, and not a port's object: %s", l)
		}
		for _, other := range strings.Split(got, "\n") {
			if other != l && (strings.Contains(other, " "+name+" ") || strings.HasSuffix(other, " "+name) ||
				strings.Contains(other, "@"+name) || strings.Contains(other, `"`+name+`"`)) {
				t.Errorf("left over %s %s is not inert: %s", f[1], name, other)
			}
		}
	}
	return extra
}

// A sync with nothing changed sends nothing.
func TestPartialSyncNothing(t *testing.T) {
	f := knft.NewFake(Table)
	cfg := testConfig
	cfg.NFT = f
	p, _ := New(cfg)
	snap := st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()))
	for range 3 {
		if err := p.Sync(context.Background(), snap); err != nil {
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
	cfg := testConfig
	cfg.NFT = f
	p, _ := New(cfg)
	if err := p.Sync(context.Background(), st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()))); err != nil {
		t.Fatal(err)
	}
	f.fail = true
	if err := p.Sync(context.Background(), st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()[:1]))); err == nil {
		t.Fatal("no error from a failed transaction")
	}
	if h := p.Health(); h.Healthy || h.ConsecutiveFailures != 1 || !strings.Contains(h.LastError, "No buffer space") {
		t.Errorf("health after a failure: %+v", h)
	}
	if err := p.Resync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if h := p.Health(); !h.Healthy || h.FullSyncs != 2 {
		t.Errorf("health after the retry: %+v, want a second full sync", h)
	}
}

// Cleanup deletes the table, and finds nothing to do the second time.
func TestCleanup(t *testing.T) {
	f := syncedFake(t, testConfig, st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints())))
	for range 2 {
		if err := Cleanup(context.Background(), f); err != nil {
			t.Fatal(err)
		}
	}
	if d := f.Dump(); d != "" {
		t.Errorf("after Cleanup:\n%s", d)
	}
}

// Periodic syncs are partial while the table is as the last full sync left it;
// once per SyncPeriod a sync counts the base chains' rules, and one that finds
// the table flushed (rules gone, chains and maps left) or deleted is full and
// writes it all again.
func TestLostTableRepaired(t *testing.T) {
	for _, tt := range []struct {
		name string
		lose func(tx *knftables.Transaction)
		want string // in Health.LastRepair
	}{
		{"flushed", func(tx *knftables.Transaction) { tx.Flush(&knftables.Table{}) }, "chain filter-prerouting holds 0 rules, want 1"},
		{"deleted", func(tx *knftables.Transaction) { tx.Delete(&knftables.Table{}) }, "no such table"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := knft.NewFake(Table)
			now := time.Unix(0, 0)
			cfg := testConfig
			cfg.NFT, cfg.SyncPeriod, cfg.Now = f, 30*time.Second, func() time.Time { return now }
			p, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			sync := func(advance time.Duration) Health {
				t.Helper()
				now = now.Add(advance)
				if err := p.Resync(context.Background()); err != nil {
					t.Fatal(err)
				}
				return p.Health()
			}
			if err := p.Sync(context.Background(), st.Snapshot(st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()))); err != nil {
				t.Fatal(err)
			}
			want := f.Dump()
			if h := sync(30 * time.Second); h.PartialSyncs != 1 || h.Repairs != 0 {
				t.Fatalf("health %+v: want the periodic sync partial, no repair", h)
			}
			tx := f.NewTransaction()
			tt.lose(tx)
			if err := f.Run(context.Background(), tx); err != nil {
				t.Fatal(err)
			}
			h := sync(30 * time.Second)
			if h.FullSyncs != 2 || h.Repairs != 1 || !strings.Contains(h.LastRepair, tt.want) {
				t.Errorf("health %+v: want a full sync repairing the table, LastRepair saying %q", h, tt.want)
			}
			// The table line aside: knftables' Fake drops the table's comment
			// on `flush table`, and `add table` leaves an existing table as it is.
			_, got, _ := strings.Cut(f.Dump(), "\n")
			if _, want, _ := strings.Cut(want, "\n"); got != want {
				t.Errorf("after the repair:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// A partial sync keeps a port's objects while service.Port.RendersSameAs
// says the port renders the same: after a change of any one field of a port
// (servicetest.Variants), the table is what a full sync writes, but for what
// a partial sync leaves for the next full one to delete (leftovers), and the
// status is the same.
func TestPartialSyncEveryField(t *testing.T) {
	st.CheckPartialSyncs(t, newFakePath, func(t *testing.T, partial, full string) {
		gotTable, gotStatus, _ := strings.Cut(partial, statusMark)
		wantTable, wantStatus, _ := strings.Cut(full, statusMark)
		if leftovers(t, gotTable, wantTable); t.Failed() {
			t.Logf("after the partial sync:\n%s\nwant (a full sync):\n%s", gotTable, wantTable)
		}
		if gotStatus != wantStatus {
			t.Errorf("status after the partial sync:\n%s\nwant (a full sync):\n%s", gotStatus, wantStatus)
		}
	})
}

// fakePath is a Dataplane on a Fake, as servicetest's checks drive it.
type fakePath struct {
	f *knft.Fake
	p *Dataplane
}

func newFakePath(t *testing.T) st.Path {
	fp := &fakePath{f: knft.NewFake(Table)}
	fp.Restart(t)
	return fp
}

func (fp *fakePath) Restart(t *testing.T) {
	cfg := testConfig
	cfg.NFT = fp.f
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	fp.p = p
}

func (fp *fakePath) Sync(t *testing.T, snap *service.Snapshot) {
	if err := fp.p.Sync(context.Background(), snap); err != nil {
		t.Fatal(err)
	}
}

// statusMark parts the table from the status in State.
const statusMark = "\n--- status:\n"

func (fp *fakePath) State(t *testing.T) string {
	status, err := json.MarshalIndent(fp.p.Ports(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return fp.f.Dump() + statusMark + string(status)
}
