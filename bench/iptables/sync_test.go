package iptables

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	svcdataplane "github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/internal/netnstest"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	offload "github.com/svcproxy/svcproxy/offload/iptables"
	"github.com/svcproxy/svcproxy/service"
)

var rulesConfig = offload.Config{Node: svcdataplane.Node{NodeName: "node-a"}}

// backends are the iptables variants the sync benchmarks run on: the system's
// iptables-restore (nf_tables on Debian 12) and iptables-legacy. Sizes at which a
// backend takes minutes are left out (see the doc), unless asked for: nft at
// 10,000 ports runs only with SVCP_BENCH_NFT_10K=1 (its first full sync alone takes
// tens of minutes with iptables-nft 1.8.9's --noflush; give go test a -timeout).
var backends = []struct {
	name  string
	sizes []int
	tools []string
}{
	{"nft", nftSizes(os.Getenv("SVCP_BENCH_NFT_10K")), []string{"iptables-restore", "iptables-save"}},
	{"legacy", []int{1000, 10000}, []string{"iptables-legacy-restore", "iptables-legacy-save", "iptables-legacy"}},
}

// nftSizes are the nft sizes: 1,000 ports, and 10,000 when nft10k is "1".
func nftSizes(nft10k string) []int {
	if nft10k == "1" {
		return []int{1000, 10000}
	}
	return []int{1000}
}

func backend(b *testing.B, name string) kiptables.Interface {
	b.Helper()
	if name == "legacy" {
		return Legacy{}
	}
	ipt, err := kiptables.New(kiptables.Config{})
	if err != nil {
		b.Fatal(err)
	}
	return ipt
}

// forEach runs f per backend and size, each in a fresh namespace.
func forEach(b *testing.B, f func(b *testing.B, ns *netnstest.NS, ipt kiptables.Interface, n int)) {
	for _, be := range backends {
		for _, n := range be.sizes {
			b.Run(fmt.Sprintf("%s/ports=%d", be.name, n), func(b *testing.B) {
				netnstest.RequireRoot(b, be.tools...)
				f(b, netnstest.New(b), backend(b, be.name), n)
				keep(b, nil)
			})
		}
	}
}

func newDataplane(b *testing.B) *offload.Dataplane {
	b.Helper()
	return newDataplaneOn(b, backend(b, "nft"))
}

func newDataplaneOn(b *testing.B, ipt kiptables.Interface) *offload.Dataplane {
	b.Helper()
	// SyncPeriod: an hour, so that no sync of a benchmark also pays for the
	// periodic check of the hooks (a few iptables -C, once per 30 s by
	// default): the benchmarks measure a change, not the period's upkeep.
	cfg := rulesConfig
	cfg.IPTables, cfg.SyncPeriod = ipt, time.Hour
	p, err := offload.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return p
}

func sync(b *testing.B, ns *netnstest.NS, p *offload.Dataplane, snap *service.Snapshot) {
	b.Helper()
	if err := ns.Do(func() error { return p.Sync(context.Background(), snap) }); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRender is the pure part of a sync: Snapshot to restore text.
func BenchmarkRender(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("ports=%d", n), func(b *testing.B) {
			snap := Cluster(n)
			b.ReportAllocs()
			var size int
			for b.Loop() {
				text, err := offload.Render(rulesConfig, snap)
				if err != nil {
					b.Fatal(err)
				}
				size = len(text)
			}
			b.ReportMetric(float64(size)/1e6, "MB")
			b.ReportMetric(float64(bytes.Count(mustRender(b, snap), []byte("\n-A "))), "rules")
		})
	}
}

func mustRender(b *testing.B, snap *service.Snapshot) []byte {
	text, err := offload.Render(rulesConfig, snap)
	if err != nil {
		b.Fatal(err)
	}
	return text
}

// BenchmarkFullSync is the periodic (or restart) full sync: the rules are in the
// kernel already, a new Dataplane reads them (iptables-save), rewrites every chain
// in one iptables-restore, and ensures its hooks.
func BenchmarkFullSync(b *testing.B) {
	forEach(b, func(b *testing.B, ns *netnstest.NS, ipt kiptables.Interface, n int) {
		snap := Cluster(n)
		sync(b, ns, newDataplaneOn(b, ipt), snap) // the first sync into an empty kernel
		b.ResetTimer()
		for range b.N {
			b.StopTimer()
			p := newDataplaneOn(b, ipt)
			b.StartTimer()
			sync(b, ns, p, snap)
		}
	})
}

// BenchmarkOneServiceChange is a partial sync after one Service's endpoints
// changed (a pod replaced): only that port's chains are written.
func BenchmarkOneServiceChange(b *testing.B) {
	forEach(b, func(b *testing.B, ns *netnstest.NS, ipt kiptables.Interface, n int) {
		snap := Cluster(n)
		p := newDataplaneOn(b, ipt)
		sync(b, ns, p, snap)
		changed := n / 2
		b.ResetTimer()
		for i := range b.N {
			b.StopTimer()
			next := Replace(snap, changed, Service(changed, i+1))
			b.StartTimer()
			sync(b, ns, p, next)
			snap = next
		}
		b.StopTimer()
		if h := p.Health(); h.PartialSyncs != uint64(b.N) {
			b.Fatalf("health %+v: want %d partial syncs", h, b.N)
		}
		b.ReportMetric(float64(p.Health().RestoreBytes), "restore-bytes")
	})
}

// BenchmarkAddService is a partial sync that adds (or removes) a Service:
// SVCP-SERVICES, one rule per port, is rewritten too.
func BenchmarkAddService(b *testing.B) {
	forEach(b, func(b *testing.B, ns *netnstest.NS, ipt kiptables.Interface, n int) {
		base := Cluster(n)
		p := newDataplaneOn(b, ipt)
		sync(b, ns, p, base)
		b.ResetTimer()
		for i := range b.N {
			b.StopTimer()
			snap := base
			if i%2 == 0 {
				snap = Replace(base, n, Service(n, 0))
			}
			b.StartTimer()
			sync(b, ns, p, snap) // alternately add and remove svc-n
		}
		b.StopTimer()
		b.ReportMetric(float64(p.Health().RestoreBytes), "restore-bytes")
	})
}

// BenchmarkNaive applies the same rules one `iptables` command per rule (and
// per chain), the way a first attempt would, for the ratio to one restore.
func BenchmarkNaive(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("ports=%d", n), func(b *testing.B) {
			netnstest.RequireRoot(b, "iptables")
			text := mustRender(b, Cluster(n))
			cmds := naiveCommands(text)
			for range b.N {
				b.StopTimer()
				ns := netnstest.New(b)
				b.StartTimer()
				err := ns.Do(func() error {
					for _, c := range cmds {
						if out, err := exec.Command("iptables", c...).CombinedOutput(); err != nil {
							return fmt.Errorf("iptables %s: %v: %s", strings.Join(c, " "), err, out)
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			keep(b, map[string]float64{"commands": float64(len(cmds))})
		})
		// The same rules in one iptables-restore (--noflush, as svcproxy
		// applies them) into an empty namespace on the same backend: the
		// ratio's other side, measured in the same run.
		b.Run(fmt.Sprintf("one-restore/ports=%d", n), func(b *testing.B) {
			netnstest.RequireRoot(b, "iptables-restore")
			text := mustRender(b, Cluster(n))
			ipt := backend(b, "nft")
			for range b.N {
				b.StopTimer()
				ns := netnstest.New(b)
				b.StartTimer()
				if err := ns.Do(func() error { return ipt.Restore(context.Background(), text) }); err != nil {
					b.Fatal(err)
				}
			}
			keep(b, nil)
		})
	}
}

// naiveCommands turns restore text into iptables commands: -N per chain, -A per rule.
func naiveCommands(text []byte) [][]string {
	var cmds [][]string
	table := ""
	for _, line := range strings.Split(string(text), "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
		case strings.HasPrefix(line, ":"):
			name, _, _ := strings.Cut(line[1:], " ")
			cmds = append(cmds, []string{"-w", "-t", table, "-N", name})
		case strings.HasPrefix(line, "-A "):
			cmds = append(cmds, append([]string{"-w", "-t", table}, splitQuoted(line)...))
		}
	}
	return cmds
}

// splitQuoted splits a rule line on spaces, keeping "quoted words" together.
func splitQuoted(s string) []string {
	var out []string
	var cur strings.Builder
	quoted := false
	for _, r := range s {
		switch {
		case r == '"':
			quoted = !quoted
		case r == ' ' && !quoted:
			out = append(out, cur.String())
			cur.Reset()
		default:
			cur.WriteRune(r)
		}
	}
	return append(out, cur.String())
}

func offloadRender(n int) ([]byte, error) { return offload.Render(rulesConfig, Cluster(n)) }

// discard is a kernel that accepts everything and keeps nothing: it isolates
// svcproxy's own work in a sync (render, diff, restore text) from iptables'.
type discard struct{}

func (discard) Restore(context.Context, []byte) error { return nil }
func (discard) Save(context.Context, kiptables.Table) ([]byte, error) {
	return nil, nil
}
func (discard) EnsureRule(context.Context, kiptables.Position, kiptables.Table, string, ...string) (bool, error) {
	return true, nil
}
func (discard) HasRule(context.Context, kiptables.Table, string, ...string) (bool, error) {
	return true, nil
}
func (discard) DeleteRule(context.Context, kiptables.Table, string, ...string) error { return nil }

// BenchmarkSyncCPU is svcproxy's share of a sync, without iptables: a full sync
// renders everything; a one-service change renders one port and compares the rest.
func BenchmarkSyncCPU(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("full/ports=%d", n), func(b *testing.B) {
			snap := Cluster(n)
			for b.Loop() {
				p := newDataplaneOn(b, discard{})
				if err := p.Sync(context.Background(), snap); err != nil {
					b.Fatal(err)
				}
			}
			keep(b, nil)
		})
		b.Run(fmt.Sprintf("one-service-change/ports=%d", n), func(b *testing.B) {
			snap := Cluster(n)
			p := newDataplaneOn(b, discard{})
			if err := p.Sync(context.Background(), snap); err != nil {
				b.Fatal(err)
			}
			// Two states that differ in one Service's endpoints, made beforehand.
			states := []*service.Snapshot{Replace(snap, n/2, Service(n/2, 1)), snap}
			i := 0
			for b.Loop() {
				i++
				if err := p.Sync(context.Background(), states[i%2]); err != nil {
					b.Fatal(err)
				}
			}
			keep(b, nil)
		})
	}
}

func TestNFTSizes(t *testing.T) {
	tests := []struct {
		env  string
		want []int
	}{
		{"", []int{1000}},
		{"0", []int{1000}},
		{"1", []int{1000, 10000}},
	}
	for _, tt := range tests {
		if got := nftSizes(tt.env); !slices.Equal(got, tt.want) {
			t.Errorf("nftSizes(%q) = %v, want %v", tt.env, got, tt.want)
		}
	}
}
