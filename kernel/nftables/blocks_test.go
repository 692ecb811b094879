package nftables

import (
	"context"
	"fmt"
	"iter"
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/internal/netnstest"
)

func TestChainBlocks(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"a run of one chain's rules becomes one block",
			"add chain ip t svc\nflush chain ip t svc\nadd rule ip t svc numgen random mod 2 == 0 goto a\nadd rule ip t svc goto b\n",
			"add chain ip t svc\nflush chain ip t svc\nadd chain ip t svc { numgen random mod 2 == 0 goto a ; goto b ; }\n"},
		{"runs of different chains stay apart, in order",
			"add rule ip t a counter\nadd rule ip t b accept\nadd rule ip t a drop\n",
			"add chain ip t a { counter ; }\nadd chain ip t b { accept ; }\nadd chain ip t a { drop ; }\n"},
		{"nothing moves past a flush",
			"add rule ip t a counter\nflush chain ip t a\nadd rule ip t a drop\n",
			"add chain ip t a { counter ; }\nflush chain ip t a\nadd chain ip t a { drop ; }\n"},
		{"a set declared in the transaction may be named",
			"add set ip t aff { type ipv4_addr ; flags dynamic,timeout ; timeout 3h ; }\nadd rule ip t a ip saddr @aff goto b\nadd rule ip t b update @aff { ip saddr }\n",
			"add set ip t aff { type ipv4_addr ; flags dynamic,timeout ; timeout 3h ; }\nadd chain ip t a { ip saddr @aff goto b ; }\nadd chain ip t b { update @aff { ip saddr } ; }\n"},
		{"a set the transaction does not declare keeps its lines (nft must load it)",
			"add rule ip t a counter\nadd rule ip t a ip daddr @cluster-ips reject\n",
			"add rule ip t a counter\nadd rule ip t a ip daddr @cluster-ips reject\n"},
		{"named counters likewise",
			"add counter ip t c1\nadd rule ip t a counter name \"c1\" accept\nadd rule ip t b counter name \"c2\" accept\n",
			"add counter ip t c1\nadd chain ip t a { counter name \"c1\" accept ; }\nadd rule ip t b counter name \"c2\" accept\n"},
		{"positioned rules and other commands are left alone",
			"add rule ip t a index 0 drop\nadd element ip t m { 1.2.3.4 : goto a }\ndelete chain ip t x\n",
			"add rule ip t a index 0 drop\nadd element ip t m { 1.2.3.4 : goto a }\ndelete chain ip t x\n"},
		{"elements right after their set's declaration join it",
			"add set ip t h { type ipv4_addr . ipv4_addr ; comment \"c\" ; }\nadd element ip t h { 1.2.3.4 . 1.2.3.4 }\nadd element ip t h { 1.2.3.5 . 1.2.3.5 }\nadd element ip t other { 1.2.3.6 }\n",
			"add set ip t h { type ipv4_addr . ipv4_addr ; comment \"c\" ; elements = { 1.2.3.4 . 1.2.3.4, 1.2.3.5 . 1.2.3.5 } ; }\nadd element ip t other { 1.2.3.6 }\n"},
		{"a map's elements keep their comments and verdicts",
			"add map ip t m { type ipv4_addr : verdict ; }\nadd element ip t m { 1.2.3.4 comment \"ns/a:p\" : goto a }\n",
			"add map ip t m { type ipv4_addr : verdict ; elements = { 1.2.3.4 comment \"ns/a:p\" : goto a } ; }\n"},
		{"a declaration with nothing after it, or elements after a flush, stay as they are",
			"add set ip t h { type ipv4_addr ; }\nflush set ip t h\nadd element ip t h { 1.2.3.4 }\n",
			"add set ip t h { type ipv4_addr ; }\nflush set ip t h\nadd element ip t h { 1.2.3.4 }\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, chainBlocks(tt.in))
		})
	}
}

// The kernel ends up with the same table from the blocks as from the lines: the
// small table of the trace tests, loaded both ways, lists the same.
func TestChainBlocksKernel(t *testing.T) {
	netnstest.RequireRoot(t, "nft")
	lines, blocks := netnstest.New(t), netnstest.New(t)
	load := func(ns *netnstest.NS, text string) string {
		cmd := ns.Command(context.Background(), "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(text)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s\n%s", out, text)
		return ns.Run(t, "nft", "list", "table", "ip", "t")
	}
	text := chainBlocks(small)
	require.NotContains(t, text, "add rule", "every rule of small is in a block")
	assert.Equal(t, load(lines, small), load(blocks, text))

	// Then elements after their set's declaration, into a new set and into a
	// map that exists and already has elements (a partial sync's).
	more := "add set ip t hairpin { type ipv4_addr . ipv4_addr ; }\n" +
		"add element ip t hairpin { 198.19.1.1 . 198.19.1.1 }\nadd element ip t hairpin { 198.19.1.2 . 198.19.1.2 }\n" +
		"add map ip t service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; }\n" +
		"add element ip t service-ips { 198.18.0.21 . tcp . 80 comment \"default/web:http\" : goto service-web }\n"
	text = chainBlocks(more)
	require.NotContains(t, text, "add element", "every element follows its set's declaration")
	assert.Equal(t, load(lines, more), load(blocks, text))
}

// Real runs transactions and lists names over netlink; its errors say "not found"
// the way knftables' do.
func TestReal(t *testing.T) {
	netnstest.RequireRoot(t, "nft")
	ns := netnstest.New(t)
	ctx := context.Background()
	require.NoError(t, ns.Do(func() error {
		nft, err := New("t")
		require.NoError(t, err)
		_, err = nft.ListAll(ctx)
		assert.True(t, IsNotFound(err), "no table yet: %v", err)

		tx := nft.NewTransaction()
		tx.Add(&knftables.Table{})
		tx.Add(&knftables.Chain{Name: "svc"})
		tx.Add(&knftables.Chain{Name: "ep"})
		tx.Add(&knftables.Set{Name: "aff", Type: "ipv4_addr"})
		tx.Add(&knftables.Counter{Name: "c"})
		tx.Add(&knftables.Rule{Chain: "svc", Rule: "ip saddr @aff goto ep"})
		tx.Add(&knftables.Rule{Chain: "svc", Rule: "goto ep"})
		tx.Add(&knftables.Rule{Chain: "ep", Rule: `counter name "c" accept`})
		require.NoError(t, nft.Run(ctx, tx))

		objs, err := nft.ListAll(ctx)
		require.NoError(t, err)
		assert.ElementsMatch(t, []string{"svc", "ep"}, objs["chain"])
		assert.Equal(t, []string{"aff"}, objs["set"])
		assert.Equal(t, []string{"c"}, objs["counter"])

		// Counters come over netlink, with their counts: two datagrams
		// through the rule that names "c" (ep accepts what svc, jumped to
		// from an output chain, sends it).
		tx = nft.NewTransaction()
		tx.Add(&knftables.Chain{Name: "out", Type: knftables.PtrTo(knftables.FilterType), Hook: knftables.PtrTo(knftables.OutputHook), Priority: knftables.PtrTo(knftables.FilterPriority)})
		tx.Add(&knftables.Rule{Chain: "out", Rule: "udp dport 9 goto svc"})
		require.NoError(t, nft.Run(ctx, tx))
		conn, err := net.ListenPacket("udp", "127.0.0.1:0")
		require.NoError(t, err)
		for range 2 { // unconnected: the port unreachable of the first fails no write
			_, err = conn.WriteTo([]byte("x"), &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9})
			require.NoError(t, err)
		}
		conn.Close()
		counters, err := nft.ListCounters(ctx)
		require.NoError(t, err)
		require.Len(t, counters, 1)
		assert.Equal(t, "c", counters[0].Name)
		assert.Equal(t, uint64(2), *counters[0].Packets)
		assert.NotZero(t, *counters[0].Bytes)

		tx = nft.NewTransaction()
		tx.Delete(&knftables.Chain{Name: "no-such-chain"})
		err = nft.Run(ctx, tx)
		assert.True(t, IsNotFound(err), "%v", err)

		tx = nft.NewTransaction()
		tx.Add(&knftables.Rule{Chain: "svc", Rule: "goto no-such-chain"})
		assert.Error(t, nft.Run(ctx, tx))

		tx = nft.NewTransaction()
		tx.Add(&knftables.Rule{Chain: "", Rule: "accept"}) // invalid: knftables refuses it
		assert.Error(t, nft.Run(ctx, tx))

		tx = nft.NewTransaction()
		tx.Delete(&knftables.Table{})
		require.NoError(t, nft.Run(ctx, tx))
		_, err = nft.ListAll(ctx)
		assert.True(t, IsNotFound(err), "%v", err)
		_, err = nft.ListCounters(ctx)
		assert.True(t, IsNotFound(err), "%v", err)
		return nil
	}))
}

func TestRefsDeclared(t *testing.T) {
	declared := map[string]bool{}
	addDeclaredNames(declared, []string{
		"add set ip svcproxy affinity-A { type ipv4_addr ; flags dynamic,timeout ; timeout 600s ; }",
		"add map ip svcproxy service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; }",
		"add counter ip svcproxy connections-X",
		"add chain ip svcproxy not-a-set",
	})
	require.Equal(t, map[string]bool{"affinity-A": true, "service-ips": true, "connections-X": true}, declared)
	tests := []struct {
		rule string
		want bool
	}{
		{"ip daddr . meta l4proto . th dport vmap @service-ips", true},
		{"ip saddr @affinity-A goto endpoint-A", true},
		{"update @affinity-A { ip saddr }", true},
		{"ip saddr @affinity-B goto endpoint-B", false},
		{"ip saddr @affinity-A,@cluster-ips drop", false},
		{`meta l4proto tcp counter name "connections-X" dnat to 198.19.1.10:8080`, true},
		{`meta l4proto tcp counter name "connections-Y" dnat to 198.19.1.10:8080`, false},
		{`meta l4proto tcp counter xname "connections-Y" accept`, true},
		{"numgen random mod 2 == 0 goto service-A", true},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, refsDeclared(tt.rule, declared), tt.rule)
	}
	for _, tt := range []struct {
		line             string
		kind, name, body string
		ok               bool
	}{
		{"add set ip svcproxy hairpin { type ipv4_addr . ipv4_addr ; }", "set", "ip svcproxy hairpin", "type ipv4_addr . ipv4_addr", true},
		{"add map ip6 svcproxy service-ips { type ipv6_addr : verdict ; comment \"x\" ; }", "map", "ip6 svcproxy service-ips", "type ipv6_addr : verdict ; comment \"x\"", true},
		{"add set ip svcproxy s { type ipv4_addr ; elements = { 1.2.3.4 } ; }", "", "", "", false},
		{"add chain ip svcproxy c { type nat hook output priority -101 ; }", "", "", "", false},
		{"add set ip svcproxy s", "", "", "", false},
	} {
		kind, name, body, ok := splitSetDecl(tt.line)
		require.Equal(t, []any{tt.kind, tt.name, tt.body, tt.ok}, []any{kind, name, body, ok}, tt.line)
	}
}

// RunParts is one transaction: a rule may name a set an earlier part
// declared, and a part knftables refuses leaves the table as it was, the
// parts before it too. Fake's RunParts does the same.
func TestRunParts(t *testing.T) {
	netnstest.RequireRoot(t, "nft")
	ns := netnstest.New(t)
	ctx := context.Background()
	parts := func(last func(*knftables.Transaction)) iter.Seq[func(*knftables.Transaction)] {
		return func(yield func(func(*knftables.Transaction)) bool) {
			_ = yield(func(tx *knftables.Transaction) {
				tx.Add(&knftables.Table{})
				tx.Add(&knftables.Set{Name: "aff", Type: "ipv4_addr"})
				// More than Real's 64 KB buffer: nft has read
				// some of its input when a later part fails.
				for i := range 1500 {
					tx.Add(&knftables.Element{Set: "aff", Key: []string{fmt.Sprintf("198.19.%d.%d", i/250, i%250+1)},
						Comment: knftables.PtrTo(strings.Repeat("x", 60))})
				}
			}) && yield(func(tx *knftables.Transaction) {
				tx.Add(&knftables.Chain{Name: "ep"})
				tx.Add(&knftables.Chain{Name: "svc"})
				tx.Add(&knftables.Rule{Chain: "svc", Rule: "ip saddr @aff goto ep"})
				tx.Add(&knftables.Rule{Chain: "svc", Rule: "goto ep"})
			}) && yield(func(*knftables.Transaction) {}) && yield(last)
		}
	}
	element := func(tx *knftables.Transaction) {
		tx.Add(&knftables.Element{Set: "aff", Key: []string{"198.19.100.1"}})
	}
	invalid := func(tx *knftables.Transaction) { tx.Add(&knftables.Rule{Chain: "", Rule: "accept"}) }
	for _, nft := range []Interface{NewFake("t"), nil} {
		do := func(f func(nft Interface)) { f(nft) }
		if nft == nil { // the real one, in the namespace
			do = func(f func(nft Interface)) {
				require.NoError(t, ns.Do(func() error {
					real, err := New("t")
					require.NoError(t, err)
					f(real)
					return nil
				}))
			}
		}
		do(func(nft Interface) {
			_, err := nft.RunParts(ctx, parts(invalid))
			require.Error(t, err)
			_, err = nft.ListAll(ctx)
			assert.True(t, IsNotFound(err), "%T: a refused part applies nothing: %v", nft, err)

			n, err := nft.RunParts(ctx, parts(element))
			require.NoError(t, err)
			assert.Equal(t, 1507, n, "%T: operations", nft)
			n, err = nft.CountRules(ctx, "svc")
			require.NoError(t, err)
			assert.Equal(t, 2, n, "%T", nft)
		})
	}
	got := ns.Run(t, "nft", "list", "set", "ip", "t", "aff")
	assert.Contains(t, got, "198.19.100.1")
	assert.Contains(t, got, "198.19.5.250")
}

// The parts are written as chainBlocks writes the whole: a rule naming a set
// an earlier part declared is in a block.
func TestChainBlocksAfter(t *testing.T) {
	declared := map[string]bool{}
	var b strings.Builder
	writeChainBlocksAfter(&b, "add set ip t aff { type ipv4_addr ; }\n", declared)
	writeChainBlocksAfter(&b, "add rule ip t svc ip saddr @aff goto ep\nadd rule ip t svc goto ep\n", declared)
	assert.Equal(t, "add set ip t aff { type ipv4_addr ; }\nadd chain ip t svc { ip saddr @aff goto ep ; goto ep ; }\n", b.String())
}
