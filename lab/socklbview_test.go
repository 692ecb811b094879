package lab

import (
	"context"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	ksocklb "github.com/svcproxy/svcproxy/kernel/socklb"
)

// statusSocketLB is an excerpt of svcproxy --mode socklb's /status: each
// family's maps beside its nftables path.
const statusSocketLB = `{
  "IPv4": {"mode": "socklb",
    "maps": {"health": {"synced": true}, "ports": [
      {"port": "default/web:http", "protocol": "TCP", "path": "socklb",
       "frontends": ["198.18.0.20:80"], "backends": ["198.19.1.10:8080", "198.19.1.11:8080"]},
      {"port": "default/sticky:http", "protocol": "TCP", "path": "socklb",
       "frontends": ["198.18.0.40:80"], "backends": ["198.19.1.12:8080"], "affinity": "3h0m0s"},
      {"port": "default/empty:http", "protocol": "TCP", "path": "socklb",
       "frontends": ["198.18.0.50:80"], "backends": []}]},
    "nftables": {"mode": "nftables", "ports": []}},
  "IPv6": {"mode": "socklb",
    "maps": {"ports": [
      {"port": "default/web-dual:dns", "protocol": "UDP", "path": "socklb",
       "frontends": ["[2001:db8:18::24]:53"], "backends": ["[2001:db8:19::1:10]:53"]}]}},
  "ports": []
}`

// The maps read from /status, loaded into kernel/socklb's Fake, answer as
// the programs would: a Service's connect() is rewritten to the backend in
// the slot picked, affinity is kept, a Service with no backend and an
// address that is no Service are left alone.
func TestSocketLBStatus(t *testing.T) {
	ports, ok, err := parseSocketLBStatus([]byte(statusSocketLB))
	require.NoError(t, err)
	require.True(t, ok)
	require.Len(t, ports, 4)
	f, err := socketLBFake(context.Background(), ports)
	require.NoError(t, err)
	all, err := f.Services(context.Background())
	require.NoError(t, err)
	require.Len(t, all, 4)

	for _, tt := range []struct {
		proto  ksocklb.Protocol
		dst    string
		random uint32
		want   string
	}{
		{ksocklb.TCP, "198.18.0.20:80", 1, "198.19.1.11:8080"},
		{ksocklb.TCP, "198.18.0.40:80", 7, "198.19.1.12:8080"},
		{ksocklb.TCP, "198.18.0.50:80", 0, "198.18.0.50:80"},
		{ksocklb.TCP, "198.18.0.99:80", 0, "198.18.0.99:80"},
		{ksocklb.UDP, "[2001:db8:18::24]:53", 0, "[2001:db8:19::1:10]:53"},
		{ksocklb.TCP, "[2001:db8:18::24]:53", 0, "[2001:db8:18::24]:53"},
	} {
		got, tr := f.Connect(ksocklb.Client{Random: tt.random}, tt.proto, netip.MustParseAddrPort(tt.dst))
		require.Equal(t, tt.want, got.String(), "%s %s:\n%s", tt.proto, tt.dst, tr)
	}
	require.Equal(t, 3*60*60, int(all[ksocklb.Service{VIP: netip.MustParseAddr("198.18.0.40"), Port: 80, Protocol: ksocklb.TCP}].AffinityTimeout.Seconds()))

	_, ok, err = parseSocketLBStatus([]byte(`{"IPv4": {"mode": "nftables", "ports": []}}`))
	require.NoError(t, err)
	require.False(t, ok, "nftables mode has no socket-LB maps")
}

// A backend that is no address is an error naming the port and the field.
func TestSocketLBStatusBad(t *testing.T) {
	_, err := socketLBFake(context.Background(), []socketLBPort{{Port: "default/web:http", Protocol: "TCP", Frontends: []string{"198.18.0.20:80"}, Backends: []string{"web-0"}}})
	require.ErrorContains(t, err, `port default/web:http: backend "web-0"`)
}

// formatSocketLB lists each frontend with its slots, named, and says what
// a Service without a backend and one with affinity do.
func TestFormatSocketLB(t *testing.T) {
	l, err := New(Config{StateDir: t.TempDir()})
	require.NoError(t, err)
	ports, _, err := parseSocketLBStatus([]byte(statusSocketLB))
	require.NoError(t, err)
	got := l.formatSocketLB(ports, func(p string) bool { return p != "default/web-dual:dns" })
	require.Contains(t, got, `198.18.0.20:80/TCP  (default/web:http)
    slot 0 -> 198.19.1.10:8080 (web-0)
    slot 1 -> 198.19.1.11:8080 (web-1)
198.18.0.40:80/TCP  (default/sticky:http)
    slot 0 -> 198.19.1.12:8080 (web-2)
    ClientIP affinity 3h0m0s, keyed by the client's network namespace
198.18.0.50:80/TCP  (default/empty:http)
    count 0: connect() left alone, the nftables path beside rejects it
`)
	require.NotContains(t, got, "2001:db8:18::24")
}
