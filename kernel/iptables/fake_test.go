package iptables

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

// portals is a small rule set in the shape svcproxy renders: a userspace portal,
// an offloaded service with two endpoints and ClientIP affinity, masquerade, and a
// service without endpoints rejected in filter.
const portals = `*filter
:SVCP-REJECT - [0:0]
-A SVCP-REJECT -d 198.18.0.30/32 -p tcp -m comment --comment "default/empty:http has no endpoints" -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable
COMMIT
*nat
:SVCP-PORTALS - [0:0]
:SVCP-SERVICES - [0:0]
:SVCP-SVC-WEB - [0:0]
:SVCP-SEP-A - [0:0]
:SVCP-SEP-B - [0:0]
:SVCP-MARK-MASQ - [0:0]
:SVCP-POSTROUTING - [0:0]
-A SVCP-SERVICES -d 198.18.0.20/32 -p tcp -m comment --comment "default/web:http cluster IP" -m tcp --dport 80 -j SVCP-SVC-WEB
-A SVCP-SVC-WEB ! -s 198.19.0.0/16 -d 198.18.0.20/32 -p tcp -m tcp --dport 80 -j SVCP-MARK-MASQ
-A SVCP-SVC-WEB -m recent --name SVCP-SEP-A --mask 255.255.255.255 --rsource --rcheck --seconds 10800 --reap -j SVCP-SEP-A
-A SVCP-SVC-WEB -m recent --name SVCP-SEP-B --mask 255.255.255.255 --rsource --rcheck --seconds 10800 --reap -j SVCP-SEP-B
-A SVCP-SVC-WEB -m statistic --mode random --probability 0.50000000000 -j SVCP-SEP-A
-A SVCP-SVC-WEB -j SVCP-SEP-B
-A SVCP-SEP-A -s 198.19.1.1/32 -j SVCP-MARK-MASQ
-A SVCP-SEP-A -p tcp -m recent --name SVCP-SEP-A --mask 255.255.255.255 --rsource --set -m tcp -j DNAT --to-destination 198.19.1.1:8080
-A SVCP-SEP-B -s 198.19.1.2/32 -j SVCP-MARK-MASQ
-A SVCP-SEP-B -p tcp -m recent --name SVCP-SEP-B --mask 255.255.255.255 --rsource --set -m tcp -j DNAT --to-destination 198.19.1.2:8080
-A SVCP-MARK-MASQ -j MARK --or-mark 0x4000
-A SVCP-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A SVCP-POSTROUTING -j MARK --xor-mark 0x4000
-A SVCP-POSTROUTING -m comment --comment "masquerade marked traffic" -j MASQUERADE --random-fully
-A SVCP-PORTALS -d 198.18.0.10/32 -p tcp -m comment --comment "default/legacy:http portal" -m tcp --dport 80 -j REDIRECT --to-ports 40123
-A SVCP-PORTALS -d 198.18.0.10/32 -p udp -m udp --dport 53 -j REDIRECT --to-ports 40124
COMMIT
`

// newPortals returns a Fake loaded with portals and hooked like svcproxy hooks it.
func newPortals(t *testing.T) *Fake {
	t.Helper()
	ctx := context.Background()
	f := NewFake()
	require.NoError(t, f.Restore(ctx, []byte(portals)))
	hooks := []struct {
		table       Table
		chain, jump string
	}{
		{TableNAT, "PREROUTING", "SVCP-SERVICES"},
		{TableNAT, "OUTPUT", "SVCP-SERVICES"},
		{TableNAT, "PREROUTING", "SVCP-PORTALS"},
		{TableNAT, "OUTPUT", "SVCP-PORTALS"},
		{TableNAT, "POSTROUTING", "SVCP-POSTROUTING"},
		{TableFilter, "INPUT", "SVCP-REJECT"},
		{TableFilter, "FORWARD", "SVCP-REJECT"},
		{TableFilter, "OUTPUT", "SVCP-REJECT"},
	}
	for _, h := range hooks {
		_, err := f.EnsureRule(ctx, Append, h.table, h.chain, "-m", "comment", "--comment", "svcproxy", "-j", h.jump)
		require.NoError(t, err)
	}
	return f
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run with -update to create %s", path)
	assert.Equal(t, string(want), got)
}

func TestDumpGolden(t *testing.T) {
	f := newPortals(t)
	golden(t, "portals.dump", f.Dump())

	// Dump is valid restore input that reproduces itself.
	g := NewFake()
	require.NoError(t, g.Restore(context.Background(), []byte(f.Dump())))
	assert.Equal(t, f.Dump(), g.Dump())
}

func TestRestoreNoflush(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	require.NoError(t, f.Restore(ctx, []byte("*nat\n:A - [0:0]\n:B - [0:0]\n-A A -j B\n-A B -j ACCEPT\nCOMMIT\n")))
	// Declaring A again flushes it; B, not declared, keeps its rule.
	require.NoError(t, f.Restore(ctx, []byte("*nat\n:A - [0:0]\nCOMMIT\n")))
	out, err := f.Save(ctx, TableNAT)
	require.NoError(t, err)
	assert.Contains(t, string(out), "-A B -j ACCEPT\n")
	assert.NotContains(t, string(out), "-A A ")
	// Deleting a chain: flush it and the chains that jump to it, then -X.
	require.NoError(t, f.Restore(ctx, []byte("*nat\n:B - [0:0]\n-X B\nCOMMIT\n")))
	out, _ = f.Save(ctx, TableNAT)
	assert.NotContains(t, string(out), ":B ")
}

func TestRestoreRejects(t *testing.T) {
	tests := []struct {
		name, rules, err string
	}{
		{"jump to missing chain", "*nat\n:A - [0:0]\n-A A -j SVCP-NOPE\nCOMMIT\n", `line 3 "-A A -j SVCP-NOPE": target "SVCP-NOPE" is neither a known target nor a chain of table nat`},
		{"unknown target", "*nat\n:A - [0:0]\n-A A -j FROB\nCOMMIT\n", `target "FROB"`},
		{"unknown table", "*natt\nCOMMIT\n", `unknown table "natt"`},
		{"missing COMMIT", "*nat\n:A - [0:0]\n", "table nat: missing COMMIT"},
		{"two tables without COMMIT", "*nat\n*filter\nCOMMIT\n", "table nat has no COMMIT"},
		{"rule outside table", "-A PREROUTING -j ACCEPT\n", "outside a *table"},
		{"missing chain", "*nat\n-A NOPE -j ACCEPT\nCOMMIT\n", "chain NOPE does not exist in table nat"},
		{"malformed declaration", "*nat\n:A\nCOMMIT\n", `want ":NAME POLICY [0:0]"`},
		{"unknown command", "*nat\n-Q A\nCOMMIT\n", `unknown command "-Q"`},
		{"bad address", "*nat\n-A PREROUTING -d 198.18.0.300 -j ACCEPT\nCOMMIT\n", "not an address"},
		{"dport without -p", "*nat\n-A PREROUTING --dport 80 -j ACCEPT\nCOMMIT\n", "no match module"},
		{"tcp match on udp", "*nat\n-A PREROUTING -p udp -m tcp --dport 80 -j ACCEPT\nCOMMIT\n", "match tcp needs -p tcp"},
		{"unknown option", "*nat\n-A PREROUTING -m statistic --mood random -j ACCEPT\nCOMMIT\n", "match statistic: unknown option --mood"},
		{"bad probability", "*nat\n-A PREROUTING -m statistic --mode random --probability 2 -j ACCEPT\nCOMMIT\n", "want a number from 0 to 1"},
		{"DNAT in filter", "*filter\n-A INPUT -j DNAT --to-destination 1.2.3.4\nCOMMIT\n", "target DNAT is only valid in table nat"},
		{"REJECT in nat", "*nat\n-A PREROUTING -j REJECT\nCOMMIT\n", "target REJECT is only valid in table filter"},
		{"bad DNAT", "*nat\n-A PREROUTING -j DNAT --to-destination nowhere\nCOMMIT\n", "want ip or ip:port"},
		{"unknown target option", "*nat\n-A PREROUTING -j DNAT --to 1.2.3.4\nCOMMIT\n", "target DNAT: unknown option --to"},
		{"missing ipset", "*nat\n-A PREROUTING -m set --match-set SVCP-IPS dst,dst -j ACCEPT\nCOMMIT\n", "ipset SVCP-IPS does not exist"},
		{"delete used chain", "*nat\n:A - [0:0]\n:B - [0:0]\n-A A -j B\n-X B\nCOMMIT\n", "chain B is referenced by A"},
		{"delete non-empty chain", "*nat\n:A - [0:0]\n-A A -j ACCEPT\n-X A\nCOMMIT\n", "chain A is not empty"},
		{"delete built-in chain", "*nat\n-X PREROUTING\nCOMMIT\n", "cannot delete built-in chain"},
		{"long chain name", "*nat\n:SVCP-0123456789012345678901234 - [0:0]\nCOMMIT\n", "want 1 to 28 characters"},
		{"jump to built-in", "*nat\n:A - [0:0]\n-A A -j OUTPUT\nCOMMIT\n", "cannot jump to built-in chain"},
		{"unterminated quote", "*nat\n-A PREROUTING -m comment --comment \"x -j ACCEPT\nCOMMIT\n", "unterminated quote"},
		{"goto", "*nat\n:A - [0:0]\n-A PREROUTING -g A\nCOMMIT\n", "-g is not supported"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newPortals(t)
			before := f.Dump()
			err := f.Restore(context.Background(), []byte(tc.rules))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.err)
			assert.Equal(t, before, f.Dump(), "a failed restore must not change anything")
		})
	}
}

// TestRestorePerTable shows the one way a restore is not all-or-nothing, as with the
// real iptables-restore: a table block that committed stays when a later one fails.
func TestRestorePerTable(t *testing.T) {
	f := NewFake()
	err := f.Restore(context.Background(), []byte("*nat\n:SVCP-A - [0:0]\nCOMMIT\n*filter\n:SVCP-B - [0:0]\n-A SVCP-B -j NOPE\nCOMMIT\n"))
	require.ErrorContains(t, err, "line 6")
	assert.Contains(t, f.Dump(), ":SVCP-A - [0:0]")
	assert.NotContains(t, f.Dump(), "SVCP-B")
}

func TestEnsureDeleteRule(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	require.NoError(t, f.Restore(ctx, []byte("*nat\n:SVCP-A - [0:0]\n:SVCP-B - [0:0]\nCOMMIT\n")))
	existed, err := f.EnsureRule(ctx, Append, TableNAT, "PREROUTING", "-j", "SVCP-A")
	require.NoError(t, err)
	assert.False(t, existed)
	existed, err = f.EnsureRule(ctx, Append, TableNAT, "PREROUTING", "-j", "SVCP-A")
	require.NoError(t, err)
	assert.True(t, existed, "second EnsureRule finds the rule")
	_, err = f.EnsureRule(ctx, Prepend, TableNAT, "PREROUTING", "-j", "SVCP-B")
	require.NoError(t, err)
	// Addresses compare in iptables-save form.
	_, err = f.EnsureRule(ctx, Append, TableNAT, "OUTPUT", "-d", "198.18.0.1", "-j", "SVCP-A")
	require.NoError(t, err)
	existed, err = f.EnsureRule(ctx, Append, TableNAT, "OUTPUT", "-d", "198.18.0.1/32", "-j", "SVCP-A")
	require.NoError(t, err)
	assert.True(t, existed)

	out, _ := f.Save(ctx, TableNAT)
	assert.Contains(t, string(out), "-A PREROUTING -j SVCP-B\n-A PREROUTING -j SVCP-A\n")

	require.NoError(t, f.DeleteRule(ctx, TableNAT, "PREROUTING", "-j", "SVCP-A"))
	require.NoError(t, f.DeleteRule(ctx, TableNAT, "PREROUTING", "-j", "SVCP-A"), "deleting twice is fine")
	require.NoError(t, f.DeleteRule(ctx, TableNAT, "NOPE", "-j", "SVCP-A"), "a missing chain is fine")
	out, _ = f.Save(ctx, TableNAT)
	assert.NotContains(t, string(out), "-A PREROUTING -j SVCP-A")

	_, err = f.EnsureRule(ctx, Append, TableNAT, "PREROUTING", "-j", "SVCP-NOPE")
	assert.ErrorContains(t, err, `target "SVCP-NOPE"`)
}

func TestSplitLine(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{`-A X -j ACCEPT`, []string{"-A", "X", "-j", "ACCEPT"}},
		{`-m comment --comment "a b"  -j X`, []string{"-m", "comment", "--comment", "a b", "-j", "X"}},
		{`--comment "say \"hi\""`, []string{"--comment", `say "hi"`}},
		{`--comment ""`, []string{"--comment", ""}},
	}
	for _, tc := range tests {
		got, err := splitLine(tc.in)
		require.NoError(t, err)
		assert.Equal(t, tc.want, got, tc.in)
	}
}

func TestRuleCanonical(t *testing.T) {
	tests := []struct{ in, want string }{
		{"-p tcp -d 198.18.0.10 --dport 80 -j ACCEPT", "-d 198.18.0.10/32 -p tcp -m tcp --dport 80 -j ACCEPT"},
		{"-p udp --destination-port 53 -s 198.19.0.5/16 -j ACCEPT", "-s 198.19.0.0/16 -p udp -m udp --dport 53 -j ACCEPT"},
		{"! -i eth0 -p tcp -m multiport --dports 80,443 -j RETURN", "! -i eth0 -p tcp -m multiport --dports 80,443 -j RETURN"},
		{"-m comment --comment \"a b\" -j ACCEPT", "-m comment --comment \"a b\" -j ACCEPT"},
		{"-p all -j ACCEPT", "-j ACCEPT"},
		{"-m physdev --physdev-is-in -j ACCEPT", "-m physdev --physdev-is-in -j ACCEPT"},
	}
	for _, tc := range tests {
		r, err := parseRule(strings.Fields(tc.in))
		if tc.in == "-m comment --comment \"a b\" -j ACCEPT" {
			r, err = parseRule([]string{"-m", "comment", "--comment", "a b", "-j", "ACCEPT"})
		}
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, r.String(), tc.in)
	}
}

func TestDeleteChains(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	require.NoError(t, f.Restore(ctx, []byte("*nat\n:SVCP-A - [0:0]\n:SVCP-B - [0:0]\n-A SVCP-A -j SVCP-B\nCOMMIT\n")))
	text := DeleteChains(TableNAT, "SVCP-A", "SVCP-B")
	assert.Equal(t, "*nat\n:SVCP-A - [0:0]\n:SVCP-B - [0:0]\n-X SVCP-A\n-X SVCP-B\nCOMMIT\n", string(text))
	require.NoError(t, f.Restore(ctx, text), "the chains go even though one jumped to the other")
	assert.NotContains(t, f.Dump(), "SVCP-")
	assert.Nil(t, DeleteChains(TableNAT), "no chains, no text")
}
