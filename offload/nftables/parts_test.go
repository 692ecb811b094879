package nftables

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	knft "github.com/svcproxy/svcproxy/kernel/nftables"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// manyPorts is a Snapshot of n Services of 3 endpoints each, every endpoint
// address its own, every tenth Service with ClientIP affinity (its rules
// name the sets its part declares) and every seventh with a NodePort; two
// Services share an external IP and port, so two ports render one key.
func manyPorts(n int) *service.Snapshot {
	var svcs []*service.Service
	for i := range n {
		var eps []service.Endpoint
		for k := range 3 {
			a := 3*i + k
			eps = append(eps, st.Endpoint(fmt.Sprintf("198.19.%d.%d:8080", a/250, a%250+1), st.ThisNode))
		}
		var opts []st.Opt
		if i%10 == 0 {
			opts = append(opts, st.WithAffinity(time.Hour))
		}
		if i%7 == 0 {
			opts = append(opts, st.WithNodePort(uint16(30000+i)))
		}
		if i < 2 {
			opts = append(opts, st.WithExternalIPs("198.18.200.1"))
		}
		svcs = append(svcs, st.Service(fmt.Sprintf("svc-%04d", i), fmt.Sprintf("198.18.%d.%d", i/250, i%250+1), 80, eps, opts...))
	}
	return st.Snapshot(svcs...)
}

// A full sync comes in parts of at most partPorts ports and partElements
// elements of one set, which together are what the whole transaction was:
// every element once, each set's elements after its declaration.
func TestFullPartsCoverTheTable(t *testing.T) {
	snap := manyPorts(700) // 3 parts of ports, 2,100 hairpin elements
	rs := render(testConfig, snap, nil)
	rs.collectClusterIPs()
	var parts []string
	seen := map[string]int{}
	for fill := range rs.fullParts(staleObjects{noTable: true}) {
		tx := knftables.NewFake(knftables.IPv4Family, Table).NewTransaction()
		fill(tx)
		parts = append(parts, tx.String())
	}
	if len(parts) < 1+3+2 {
		t.Fatalf("%d parts: want the table, 3 of ports and at least 2 of elements", len(parts))
	}
	for i, text := range parts {
		var elements, decls int
		var set string
		for l := range strings.Lines(text) {
			if strings.HasPrefix(l, "add set ") || strings.HasPrefix(l, "add map ") {
				decls++
			}
			name, ok := strings.CutPrefix(l, "add element ip "+Table+" ")
			if !ok {
				continue
			}
			elements++
			s, _, _ := strings.Cut(name, " ")
			if set != "" && s != set {
				t.Errorf("part %d has elements of %s and %s: want one set a part", i, set, s)
			}
			set = s
			seen[name]++
		}
		if elements > partElements {
			t.Errorf("part %d has %d elements: want at most %d", i, elements, partElements)
		}
		if elements > 0 && decls != 1 {
			t.Errorf("part %d: %d elements after %d declarations: want one", i, elements, decls)
		}
	}
	for e, n := range seen {
		if n != 1 {
			t.Errorf("element %s written %d times", e, n)
		}
	}
	whole, err := Render(testConfig, snap)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(whole, "add element "); got != len(seen) {
		t.Errorf("Render writes %d elements, the parts %d", got, len(seen))
	}
	if want := 2100 + 700; len(seen) < want {
		t.Errorf("%d elements: want at least %d (hairpin and service-ips)", len(seen), want)
	}
}

// On the real kernel, a full sync in parts (one `nft -f`) leaves the table
// that the whole transaction, Render's text, leaves: into an empty
// namespace, and again over the table (a restart's full sync, which
// flushes before it writes).
func TestKernelFullSyncInParts(t *testing.T) {
	netnstest.RequireRoot(t, "nft")
	snap := manyPorts(700)
	parts, whole := netnstest.New(t), netnstest.New(t)
	text, err := Render(testConfig, snap)
	if err != nil {
		t.Fatal(err)
	}
	cmd := whole.Command(context.Background(), "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(text)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft -f of Render's text: %v\n%s", err, out)
	}
	want := whole.Run(t, "nft", "list", "table", "ip", Table)
	for _, when := range []string{"new node", "restart"} {
		var nft knft.Interface
		if err := parts.Do(func() (err error) {
			nft, err = knft.New(Table)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		cfg := testConfig
		cfg.NFT, cfg.SyncPeriod = nft, time.Hour
		p, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := parts.Do(func() error { return p.Sync(context.Background(), snap) }); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if h := p.Health(); h.FullSyncs != 1 || p.FullSyncs() != 1 || h.Operations < 700 {
			t.Errorf("%s: health %+v: want one full sync of every port", when, h)
		}
		if got := parts.Run(t, "nft", "list", "table", "ip", Table); got != want {
			t.Errorf("%s: the table written in parts differs from Render's:\n%s", when, lineDiff(want, got))
		}
	}
}

// lineDiff lists the lines only one of a and b has.
func lineDiff(a, b string) string {
	count := map[string]int{}
	for l := range strings.Lines(a) {
		count[l]++
	}
	for l := range strings.Lines(b) {
		count[l]--
	}
	var out strings.Builder
	for l, n := range count {
		if n != 0 {
			fmt.Fprintf(&out, "%+d %s", n, l)
		}
	}
	return out.String()
}
