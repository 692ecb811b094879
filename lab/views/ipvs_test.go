package views

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	kipvs "github.com/svcproxy/svcproxy/kernel/ipvs"
	"github.com/svcproxy/svcproxy/lab/topology"
)

// The trace reads the node's IPVS through kernel/ipvs: the virtual server
// of the packet's destination, its real servers in the kernel's order, each
// named and with its weight, as `ipvsadm -ln` lists them.
func TestTraceIPVS(t *testing.T) {
	ctx := context.Background()
	f := kipvs.NewFake()
	web := kipvs.Key{Protocol: kipvs.TCP, Addr: netip.MustParseAddrPort("198.18.0.20:80")}
	dns := kipvs.Key{Protocol: kipvs.UDP, Addr: netip.MustParseAddrPort("198.18.0.10:53")}
	require.NoError(t, f.AddVirtualServer(ctx, kipvs.VirtualServer{Key: dns, Scheduler: "rr"}))
	require.NoError(t, f.AddVirtualServer(ctx, kipvs.VirtualServer{Key: web, Scheduler: "wrr"}))
	for i, a := range []string{"198.19.1.10:8080", "198.19.1.11:8080", "198.19.1.12:8080"} {
		require.NoError(t, f.AddRealServer(ctx, web, kipvs.RealServer{Addr: netip.MustParseAddrPort(a), Weight: i + 1}))
	}
	require.NoError(t, f.SetConns(web, netip.MustParseAddrPort("198.19.1.11:8080"), 2, 1))

	pkt := tracePacket{proto: "tcp", src: netip.MustParseAddr("198.19.1.2"), dst: web.Addr}
	vs, reals, ok, err := findIPVS(ctx, f, pkt)
	require.NoError(t, err)
	require.True(t, ok)
	v := New(Config{Net: topology.New(topology.Config{Plan: topology.DefaultPlan(), StateDir: t.TempDir()})})
	var w strings.Builder
	srv := writeIPVS(&w, vs, reals, v.net.HostName)

	require.Equal(t, "virtual server TCP 198.18.0.20:80, scheduler wrr", srv.hop.Rule)
	// The kernel's order is rr's; the Fake's is its own: the trace keeps
	// whichever order it is given.
	names := map[string]string{"198.19.1.10:8080": "web-0", "198.19.1.11:8080": "web-1", "198.19.1.12:8080": "web-2"}
	weights := map[string]int{"198.19.1.10:8080": 1, "198.19.1.11:8080": 2, "198.19.1.12:8080": 3}
	require.Len(t, reals, 3)
	note := "real servers:"
	for i, rs := range reals {
		a := rs.Addr.String()
		note += " -> " + a + " (" + names[a] + ")"
		require.Equal(t, rs.Addr, srv.real[i])
		require.Equal(t, weights[a], srv.weights[i])
	}
	require.Equal(t, note, srv.hop.Note)
	require.Contains(t, w.String(), "  -> 198.19.1.10:8080 (web-0)  Masq 1 0 0\n")
	require.Contains(t, w.String(), "  -> 198.19.1.11:8080 (web-1)  Masq 2 2 1\n")
	rs, _ := srv.pick(4)
	require.Equal(t, srv.real[1], rs)
	total := 0.0
	for i, way := range srv.ways(v.nameSuffix) {
		require.InDelta(t, float64(srv.weights[i])/6, way.P, 1e-9)
		total += way.P
	}
	require.InDelta(t, 1, total, 1e-9)

	pkt.proto = "udp"
	_, _, ok, err = findIPVS(ctx, f, pkt)
	require.NoError(t, err)
	require.False(t, ok, "no UDP virtual server on 198.18.0.20:80")
}
