package iptables

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/svcproxy/svcproxy/internal/netnstest"
)

// canonicalForms6 are ip6tables rules in the forms svcproxy writes, with the
// defaults ip6tables-save adds to them.
const canonicalForms6 = `*nat
:SVCP-SEP - [0:0]
:SVCP-MARK - [0:0]
-A PREROUTING -d 2001:db8:18::10 -p tcp -m tcp --dport 80 -j SVCP-SEP
-A OUTPUT -d 2001:db8:18::11/128 -p tcp -m tcp --dport 80 -j REDIRECT --to-ports 40000
-A SVCP-SEP -s 2001:db8:19::2/128 -j SVCP-MARK
-A SVCP-SEP -p tcp -m recent --set --name SVCP-SEP --rsource -m tcp -j DNAT --to-destination [2001:db8:19::2]:8080
-A SVCP-SEP -m recent --rcheck --seconds 10800 --reap --name SVCP-SEP --mask ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff --rsource -j SVCP-MARK
-A SVCP-MARK -j MARK --or-mark 0x4000
-A POSTROUTING ! -d ::1/128 -m addrtype --dst-type LOCAL -j MASQUERADE --random-fully
COMMIT
*filter
:F - [0:0]
-A F -d 2001:db8:18::12/128 -p tcp -m tcp --dport 80 -j REJECT
-A F -p tcp -j REJECT --reject-with icmp6-port-unreachable
-A F -p tcp -j REJECT --reject-with tcp-reset
COMMIT
`

// The ip6tables Fake prints what ip6tables-save prints for the same input.
func TestRealCanonicalForms6(t *testing.T) {
	ctx := context.Background()
	netnstest.RequireRoot(t, "ip6tables", "ip6tables-restore", "ip6tables-save")
	f := NewFakeFamily(IPv6)
	require.NoError(t, f.Restore(ctx, []byte(canonicalForms6)))
	n := netnstest.New(t)
	require.NoError(t, n.Do(func() error {
		r, err := New(Config{Family: IPv6})
		if err != nil {
			return err
		}
		if err := r.Restore(ctx, []byte(canonicalForms6)); err != nil {
			return err
		}
		for _, table := range []Table{TableNAT, TableFilter} {
			got, err := r.Save(ctx, table)
			if err != nil {
				return err
			}
			want, _ := f.Save(ctx, table)
			assert.Equal(t, string(want), saveComments.ReplaceAllString(string(got), ""))
		}
		return nil
	}))
	// The IPv4 tables of the namespace are empty: one family, one binary.
	assert.NotContains(t, n.Run(t, "iptables-save", "-t", "nat"), "SVCP")
}

// Each family's Fake refuses what the other family's binary would.
func TestFakeFamilyRefuses(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		fam  Family
		rule string
		want string
	}{
		{IPv6, "-A OUTPUT -d 198.18.0.10 -j ACCEPT", "not an IPv6 address"},
		{IPv6, "-A OUTPUT -s 198.19.0.0/16 -j ACCEPT", "not an IPv6 address"},
		{IPv4, "-A OUTPUT -d 2001:db8:18::10 -j ACCEPT", "not an IPv4 address"},
		{IPv6, "-A OUTPUT -p tcp -j DNAT --to-destination 198.19.1.2:80", "not an IPv6 address"},
		{IPv6, "-A OUTPUT -m recent --rcheck --mask 255.255.255.255 -j ACCEPT", "not an IPv6 mask"},
		{IPv4, "-A OUTPUT -m recent --rcheck --mask ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff -j ACCEPT", "not an IPv4 mask"},
		{IPv6, "*filter\n-A OUTPUT -j REJECT --reject-with icmp-port-unreachable", "not an ICMP type of ip6tables"},
		{IPv4, "*filter\n-A OUTPUT -j REJECT --reject-with icmp6-port-unreachable", "not an ICMP type of iptables"},
	}
	for _, c := range cases {
		t.Run(string(c.fam)+" "+c.rule, func(t *testing.T) {
			text := c.rule + "\nCOMMIT\n"
			if !strings.HasPrefix(text, "*") {
				text = "*nat\n" + text
			}
			err := NewFakeFamily(c.fam).Restore(ctx, []byte(text))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Restore = %v, want %q", err, c.want)
			}
		})
	}
	if _, err := NewFakeFamily(IPv6).Trace(Packet{Src: netip.MustParseAddr("198.19.1.2"), Dst: netip.MustParseAddrPort("198.18.0.10:80")}); err == nil {
		t.Error("IPv6 Fake traced an IPv4 packet")
	}
}

// An IPv6 packet through ip6tables rules: DNAT to an IPv6 endpoint, and the
// node's own packet REDIRECTed to ::1.
func TestTraceIPv6(t *testing.T) {
	f := NewFakeFamily(IPv6)
	require.NoError(t, f.Restore(context.Background(), []byte(canonicalForms6+"*filter\n-A OUTPUT -j F\nCOMMIT\n")))
	f.SetLocalAddrs(netip.MustParseAddr("2001:db8:19::1"))
	tr, err := f.Trace(Packet{Src: netip.MustParseAddr("2001:db8:19::9"), Dst: netip.MustParseAddrPort("[2001:db8:18::10]:80")})
	require.NoError(t, err)
	assert.Equal(t, "[2001:db8:19::2]:8080", tr.DNAT.String())
	tr, err = f.Trace(Packet{Local: true, Src: netip.MustParseAddr("2001:db8:19::1"), Dst: netip.MustParseAddrPort("[2001:db8:18::11]:80")})
	require.NoError(t, err)
	assert.Equal(t, uint16(40000), tr.Redirect)
	tr, err = f.Trace(Packet{Local: true, Src: netip.MustParseAddr("2001:db8:19::1"), Dst: netip.MustParseAddrPort("[2001:db8:18::12]:80")})
	require.NoError(t, err)
	assert.Equal(t, "REJECT", tr.Verdict)
}
