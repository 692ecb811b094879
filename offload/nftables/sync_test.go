package nftables

import (
	"context"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/internal/ruletest"
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

// partialLeftovers is the ruletest.Compare of nftables: what a partial sync
// left is what a full sync writes, and only inert leftovers beside.
func partialLeftovers(t *testing.T, partial, full string) {
	t.Helper()
	if leftovers(t, partial, full); t.Failed() {
		t.Logf("after the partial sync:\n%s\nwant (a full sync):\n%s", partial, full)
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
// writes it all again (internal/ruletest).
func TestLostTableRepaired(t *testing.T) {
	lose := func(change func(tx *knftables.Transaction)) func(t *testing.T, r ruletest.Rig) {
		return func(t *testing.T, r ruletest.Rig) {
			f := r.(*rig).nft
			tx := f.NewTransaction()
			change(tx)
			if err := f.Run(context.Background(), tx); err != nil {
				t.Fatal(err)
			}
		}
	}
	ruletest.CheckRepaired(t, rules,
		ruletest.FakeLoss{Name: "flushed", Do: lose(func(tx *knftables.Transaction) { tx.Flush(&knftables.Table{}) }),
			Repair: "chain filter-prerouting holds 0 rules, want 1",
			// The table line aside: knftables' Fake drops the table's comment
			// on `flush table`, and `add table` leaves an existing table as it is.
			Compare: func(t *testing.T, got, want string) {
				_, got, _ = strings.Cut(got, "\n")
				if _, want, _ := strings.Cut(want, "\n"); got != want {
					t.Errorf("after the repair:\n%s\nwant:\n%s", got, want)
				}
			}},
		ruletest.FakeLoss{Name: "deleted", Do: lose(func(tx *knftables.Transaction) { tx.Delete(&knftables.Table{}) }),
			Repair: "no such table"},
	)
}
