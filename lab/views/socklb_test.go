package views

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	ksocklb "github.com/svcproxy/svcproxy/kernel/socklb"
	"github.com/svcproxy/svcproxy/lab/topology"
)

// labMaps is what the socket LB's maps hold after a few connects in the
// lab: web over three pods, web-sticky with ClientIP affinity (one entry,
// the client's), a Service without endpoints, and web-dual's IPv6 side.
func labMaps(t *testing.T) ksocklb.Dump {
	t.Helper()
	ctx := context.Background()
	f := ksocklb.NewFake()
	ap := netip.MustParseAddrPort
	set := func(vip string, port uint16, e ksocklb.Entry) {
		require.NoError(t, f.SetService(ctx, ksocklb.Service{VIP: netip.MustParseAddr(vip), Port: port, Protocol: ksocklb.TCP}, e))
	}
	set("198.18.0.20", 80, ksocklb.Entry{Backends: []netip.AddrPort{ap("198.19.1.10:8080"), ap("198.19.1.11:8080"), ap("198.19.1.12:8080")}})
	set("198.18.0.21", 80, ksocklb.Entry{Backends: []netip.AddrPort{ap("198.19.1.10:8080"), ap("198.19.1.11:8080")}, AffinityTimeout: 3 * time.Hour})
	set("198.18.0.22", 80, ksocklb.Entry{})
	set("2001:db8:18::24", 80, ksocklb.Entry{Backends: []netip.AddrPort{ap("[2001:db8:19::1:10]:8080")}})
	f.Connect(ksocklb.Client{NetnsCookie: 4096, SocketCookie: 7, Random: 1, Now: time.Minute}, ksocklb.TCP, ap("198.18.0.21:80"))
	f.Connect(ksocklb.Client{NetnsCookie: 4096, SocketCookie: 8, Random: 2}, ksocklb.TCP, ap("198.18.0.20:80"))
	d, err := f.Dump(ctx)
	require.NoError(t, err)
	d.Now = 3 * time.Minute
	return d
}

// formatSocketLB lists each services element with its slots, the pods
// named, what a Service without a backend does, the affinity entries with
// their namespace named and their age, and the reverse entries.
func TestFormatSocketLB(t *testing.T) {
	v := New(Config{Net: topology.New(topology.Config{StateDir: "/run/svclab"})})
	got := v.formatSocketLB(labMaps(t), map[uint64]string{4096: "client"})
	want := `# its maps, pinned in /run/svclab-bpf/svcproxy
services: (VIP, port, protocol) -> id, backends by slot
  198.18.0.20:80/TCP  id 1
    slot 0 -> 198.19.1.10:8080 (web-0)
    slot 1 -> 198.19.1.11:8080 (web-1)
    slot 2 -> 198.19.1.12:8080 (web-2)
  198.18.0.21:80/TCP  id 2, ClientIP affinity 3h0m0s
    slot 0 -> 198.19.1.10:8080 (web-0)
    slot 1 -> 198.19.1.11:8080 (web-1)
  198.18.0.22:80/TCP  id 3
    count 0: connect() left alone, the nftables path beside rejects it
  [2001:db8:18::24]:80/TCP  id 4
    slot 0 -> [2001:db8:19::1:10]:8080 (web-0)
affinity: (netns cookie, id) -> the backend that namespace reached last
  (4096 (client), 2) -> slot 1, 198.19.1.11:8080 (web-1), used 2m0s ago
revnat: (socket cookie, backend) -> the Service the socket asked for; 2 entries
  (7, 198.19.1.11:8080) -> 198.18.0.21:80
  (8, 198.19.1.12:8080) -> 198.18.0.20:80
`
	require.Contains(t, got, want)
}

// onlyService keeps one Service's elements, its affinity entries and the
// reverse entries of sockets that asked for it.
func TestOnlyService(t *testing.T) {
	snap := loadManifests(t)
	svc, err := FindService(snap, "web")
	require.NoError(t, err)
	d := onlyService(labMaps(t), svc)
	require.Len(t, d.Services, 1)
	require.Equal(t, "198.18.0.20:80/TCP", d.Services[0].Service.String())
	require.Empty(t, d.Affinity)
	require.Len(t, d.RevNAT, 1)
	require.Equal(t, netip.MustParseAddrPort("198.19.1.12:8080"), d.RevNAT[0].Backend)
}
