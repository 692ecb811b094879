package userspace

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/service"
)

// ourRules are the rules of our chains in an iptables-save text, sorted:
// what a restore of the changes and a full restore must agree on (the
// order of the portals within a chain may differ, see changes).
func ourRules(save string) []string {
	var out []string
	for line := range strings.Lines(save) {
		if strings.HasPrefix(line, "-A SVCP-") {
			out = append(out, strings.TrimSpace(line))
		}
	}
	slices.Sort(out)
	return out
}

// fakeRules is ourRules of both tables of a Fake.
func fakeRules(t *testing.T, ipt iptables.Interface) []string {
	t.Helper()
	var save string
	for _, table := range []iptables.Table{iptables.TableFilter, iptables.TableNAT} {
		b, err := ipt.Save(context.Background(), table)
		if err != nil {
			t.Fatal(err)
		}
		save += string(b)
	}
	return ourRules(save)
}

// edited returns a copy of testPortals with edit applied to the portal at i.
func edited(i int, edit func(*Portal)) []Portal {
	out := slices.Clone(testPortals)
	edit(&out[i])
	return out
}

// TestChangesMatchAFullRestore walks the portals through the changes a sync
// meets, each written by changes onto what the one before left, and checks
// that the chains then hold what a full restore of the same portals writes.
func TestChangesMatchAFullRestore(t *testing.T) {
	created := Portal{Name: portName("default/new", "http", service.TCP), Protocol: service.TCP,
		IPs: addrs("198.18.0.30"), Port: 80, NodePort: 30090, Listener: 40010, HasEndpoints: true}
	steps := []struct {
		name    string
		portals []Portal
	}{
		{"a Service created", append(slices.Clone(testPortals), created)},
		{"two Services deleted", testPortals[1:]},
		{"endpoints gone: REJECT instead of REDIRECT", edited(0, func(p *Portal) { p.HasEndpoints = false })},
		{"endpoints back", testPortals},
		{"a new listener port", edited(0, func(p *Portal) { p.Listener = 40020 })},
		{"promoted: only the listener's guard stays", edited(0, func(p *Portal) { p.Excluded = true })},
		{"demoted", testPortals},
		{"loadBalancerSourceRanges changed", edited(5, func(p *Portal) { p.Sources = p.Sources[:1] })},
		{"no local endpoints for the ClusterIP", edited(0, func(p *Portal) { p.NoInternalEndpoints = true; p.External = addrs("198.19.100.1") })},
		{"nothing changed", edited(0, func(p *Portal) { p.NoInternalEndpoints = true; p.External = addrs("198.19.100.1") })},
		{"three Services deleted", testPortals[3:]},
		{"back again", testPortals},
	}
	ipt := iptables.NewFake()
	last := renderRules(service.IPv4, testPortals)
	if err := apply(context.Background(), ipt, last.restore(), true); err != nil {
		t.Fatal(err)
	}
	for _, st := range steps {
		want := renderRules(service.IPv4, st.portals)
		text, ok := changes(last, want)
		if !ok {
			t.Fatalf("%s: refused as too many deletions:\n%s", st.name, text)
		}
		t.Logf("%s:\n%s", st.name, text)
		if strings.Contains(string(text), "\n:") || strings.HasPrefix(string(text), ":") {
			t.Errorf("%s: a chain is declared (it would be flushed):\n%s", st.name, text)
		}
		if err := ipt.Restore(context.Background(), text); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		full := iptables.NewFake()
		if err := apply(context.Background(), full, want.restore(), true); err != nil {
			t.Fatal(err)
		}
		if got, want := fakeRules(t, ipt), fakeRules(t, full); !slices.Equal(got, want) {
			t.Errorf("%s: the changes left\n%s\nwant, as a full restore writes\n%s", st.name, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		last = want
	}
}

// TestChangesRefusesManyDeletions: past maxDeletes deletions, every chain is
// written anew instead (a "-D" costs a walk of its chain on iptables-nft).
func TestChangesRefusesManyDeletions(t *testing.T) {
	var many []Portal
	for i := range maxDeletes {
		many = append(many, Portal{Name: portName(fmt.Sprintf("default/s%d", i), "", service.TCP), Protocol: service.TCP,
			IPs: addrs(fmt.Sprintf("198.18.1.%d", i+1)), Port: 80, Listener: uint16(41000 + i), HasEndpoints: true})
	}
	all := renderRules(service.IPv4, many)
	if _, ok := changes(all, renderRules(service.IPv4, many[:maxDeletes-5])); !ok { // 15 of 48 rules
		t.Errorf("5 portals deleted (15 rules): refused, want the changes")
	}
	if _, ok := changes(all, renderRules(service.IPv4, many[:maxDeletes-6])); ok { // 18 rules
		t.Errorf("6 portals deleted (18 rules): accepted, want a full restore")
	}
	if _, ok := changes(renderRules(service.IPv4, nil), all); !ok {
		t.Errorf("%d portals added: refused, want the changes (adding costs no walk)", len(many))
	}
}

// restoreLog records the restores and hook checks a Proxier makes, and
// can delete a rule behind its back.
type restoreLog struct {
	*iptables.Fake
	mu       sync.Mutex
	restores []string
	ensures  int
}

func (r *restoreLog) Restore(ctx context.Context, rules []byte) error {
	r.mu.Lock()
	r.restores = append(r.restores, string(rules))
	r.mu.Unlock()
	return r.Fake.Restore(ctx, rules)
}

func (r *restoreLog) EnsureRule(ctx context.Context, pos iptables.Position, t iptables.Table, chain string, args ...string) (bool, error) {
	r.mu.Lock()
	r.ensures++
	r.mu.Unlock()
	return r.Fake.EnsureRule(ctx, pos, t, chain, args...)
}

// take returns the restores since the last take and the hook checks so far.
func (r *restoreLog) take() (restores []string, ensures int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	restores, r.restores = r.restores, nil
	return restores, r.ensures
}

// declares says whether a restore text declares (and so flushes) a chain:
// a full restore does, a restore of the changes does not.
func declares(text string) bool {
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, ":") {
			return true
		}
	}
	return false
}

// TestSyncRestoresOnlyTheChanges: a Service created or deleted costs a
// restore of its own rules, not of every portal; the first sync, a failed
// restore of the changes and Run's periodic resync write every chain and
// check the hooks.
func TestSyncRestoresOnlyTheChanges(t *testing.T) {
	ipt := &restoreLog{Fake: iptables.NewFake()}
	p := startProxier(t, Config{IPTables: ipt})
	svc := func(i int) svcSpec {
		return svcSpec{name: fmt.Sprintf("default/s%d", i), port: "http", clusterIP: fmt.Sprintf("198.18.1.%d", i+1), svcPort: 80,
			endpoints: []string{fmt.Sprintf("198.19.1.%d:8080", i+1)}}
	}
	var specs []svcSpec
	for i := range 20 {
		specs = append(specs, svc(i))
	}
	// check syncs specs and says what the restores were.
	check := func(what string, wantFull bool, wantEnsures int) {
		t.Helper()
		mustSync(t, p, snapshotOf(t, specs...))
		restores, ensures := ipt.take()
		if len(restores) != 1 {
			t.Fatalf("%s: %d restores, want 1", what, len(restores))
		}
		if full := declares(restores[0]); full != wantFull {
			t.Errorf("%s: a full restore %v, want %v:\n%s", what, full, wantFull, restores[0])
		}
		if ensures != wantEnsures {
			t.Errorf("%s: %d hook checks in all, want %d", what, ensures, wantEnsures)
		}
		fresh := iptables.NewFake()
		if err := apply(context.Background(), fresh, Render(service.IPv4, portalsOf(p.ports, p.cfg)), true); err != nil {
			t.Fatal(err)
		}
		if got, want := fakeRules(t, ipt), fakeRules(t, fresh); !slices.Equal(got, want) {
			t.Errorf("%s: the kernel holds\n%s\nwant\n%s", what, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	hooked := len(hooks)
	check("the first sync", true, hooked)

	specs = append(specs, svc(20))
	check("a Service created", false, hooked)
	if r := ipt.Fake.Dump(); !strings.Contains(r, "198.18.1.21/32") {
		t.Errorf("the new Service has no portal:\n%s", r)
	}

	specs = specs[1:]
	check("a Service deleted", false, hooked)

	specs[0].endpoints = nil
	check("a Service without endpoints", false, hooked)

	// Another program deletes one of our rules: the "-D" of the next change
	// finds nothing, and every chain is written again, the hooks checked.
	gone := fmt.Sprintf(`-d 198.18.1.3/32 -p tcp -m comment --comment "default/s2:http" -m tcp --dport 80 -j REDIRECT --to-ports %d`,
		portStatus(t, p, "default/s2:http").Listener)
	if err := ipt.Fake.DeleteRule(context.Background(), iptables.TableNAT, ChainPortalsHost, strings.Fields(strings.ReplaceAll(gone, `"`, ""))...); err != nil {
		t.Fatal(err)
	}
	specs = slices.DeleteFunc(specs, func(s svcSpec) bool { return s.name == "default/s2" })
	mustSync(t, p, snapshotOf(t, specs...))
	restores, ensures := ipt.take()
	if len(restores) != 2 || declares(restores[0]) || !declares(restores[1]) || ensures != 2*hooked {
		t.Errorf("after a rule was deleted behind our back: restores %q and %d hook checks, want the changes, then a full restore and %d",
			restores, ensures, 2*hooked)
	}
	if !p.Healthy() {
		t.Errorf("not healthy after the full restore: %v", p.LastError())
	}

	specs = specs[:len(specs)-8] // 8 Services, 24 rules: more than maxDeletes
	check("many Services deleted", true, 2*hooked)

	specs = append(specs, svc(30))
	if err := p.resync(true); err != nil { // Run's periodic resync
		t.Fatal(err)
	}
	if restores, ensures := ipt.take(); len(restores) != 1 || !declares(restores[0]) || ensures != 3*hooked {
		t.Errorf("the periodic resync: restores %q and %d hook checks, want one full restore and %d", restores, ensures, 3*hooked)
	}
	check("a Service created after the periodic resync", false, 3*hooked)
}
