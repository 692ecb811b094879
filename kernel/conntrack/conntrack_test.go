package conntrack

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/internal/netnstest"
)

func TestFilterArgs(t *testing.T) {
	tests := []struct {
		f    Filter
		want string
	}{
		{Filter{Protocol: "udp", OrigDst: netip.MustParseAddr("198.18.0.53"), OrigDstPort: 53, DstNAT: netip.MustParseAddr("198.19.1.10")},
			"-p udp --orig-dst 198.18.0.53 --orig-port-dst 53 --dst-nat 198.19.1.10"},
		{Filter{Protocol: "udp", OrigDstPort: 30053}, "-p udp --orig-port-dst 30053"},
	}
	for _, tt := range tests {
		if got := tt.f.String(); got != tt.want {
			t.Errorf("args %q, want %q", got, tt.want)
		}
	}
}

func TestFake(t *testing.T) {
	a := Flow{Protocol: "udp", Src: netip.MustParseAddrPort("198.19.1.50:5000"), OrigDst: netip.MustParseAddrPort("198.18.0.53:53"), DstNAT: netip.MustParseAddrPort("198.19.1.10:53")}
	b := a
	b.DstNAT = netip.MustParseAddrPort("198.19.1.11:53")
	c := a
	c.Protocol = "tcp"
	f := NewFake(a, b, c)
	n, err := f.Delete(context.Background(), Filter{Protocol: "udp", OrigDst: a.OrigDst.Addr(), OrigDstPort: 53, DstNAT: a.DstNAT.Addr()})
	if err != nil || n != 1 {
		t.Fatalf("Delete: %d, %v; want 1", n, err)
	}
	if got := f.Flows(); !slices.Equal(got, []Flow{b, c}) {
		t.Errorf("flows %v", got)
	}
	if _, err := f.Delete(context.Background(), Filter{}); err == nil {
		t.Error("Delete without a protocol: no error")
	}
}

// Real deletes a UDP flow in a namespace and counts; no match is not an error.
func TestReal(t *testing.T) {
	netnstest.RequireRoot(t, "conntrack", "iptables")
	ns := netnstest.New(t)
	ns.Run(t, "ip", "addr", "add", "198.19.0.1/32", "dev", "lo")
	// A namespace tracks connections only once a rule needs it.
	ns.Run(t, "iptables", "-A", "OUTPUT", "-m", "conntrack", "--ctstate", "NEW", "-j", "ACCEPT")
	var conn net.Conn
	if err := ns.Do(func() (err error) {
		conn, err = net.Dial("udp4", "198.19.0.1:9") // nobody listens: the flow exists anyway
		if err == nil {
			_, err = conn.Write([]byte("x"))
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := &Real{Command: ns.Command}
	ctx := context.Background()
	if n, err := r.Delete(ctx, Filter{Protocol: "udp", OrigDst: netip.MustParseAddr("198.19.0.2")}); err != nil || n != 0 {
		t.Errorf("no match: %d, %v; want 0, nil", n, err)
	}
	if n, err := r.Delete(ctx, Filter{Protocol: "udp", OrigDst: netip.MustParseAddr("198.19.0.1"), OrigDstPort: 9}); err != nil || n != 1 {
		t.Errorf("match: %d, %v; want 1, nil", n, err)
	}
}
