package socklb

import (
	"context"
	"net/netip"
	"strings"
	"testing"
)

// TestFakeConnect walks connect() calls through the Fake's map, as connect4
// would decide them.
func TestFakeConnect(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	web := Service{VIP: netip.MustParseAddr("198.18.0.10"), Port: 80, Protocol: TCP}
	dns := Service{VIP: netip.MustParseAddr("198.18.0.53"), Port: 53, Protocol: UDP}
	must(t, f.SetService(ctx, web, netip.MustParseAddrPort("198.19.1.2:8080")))
	must(t, f.SetService(ctx, dns, netip.MustParseAddrPort("198.19.1.3:5353")))

	tests := []struct {
		name  string
		proto Protocol
		dst   string
		want  string
	}{
		{"service port goes to its backend", TCP, "198.18.0.10:80", "198.19.1.2:8080"},
		{"UDP service", UDP, "198.18.0.53:53", "198.19.1.3:5353"},
		{"same VIP, other protocol: untouched", UDP, "198.18.0.10:80", "198.18.0.10:80"},
		{"same VIP, other port: untouched", TCP, "198.18.0.10:443", "198.18.0.10:443"},
		{"not a service: untouched", TCP, "198.19.1.2:8080", "198.19.1.2:8080"},
		{"IPv6: no connect6 yet", TCP, "[2001:db8:18::10]:80", "[2001:db8:18::10]:80"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := f.Connect(tt.proto, netip.MustParseAddrPort(tt.dst))
			if got.String() != tt.want {
				t.Errorf("connect(%s %s) reaches %s, want %s", tt.proto, tt.dst, got, tt.want)
			}
		})
	}

	must(t, f.DeleteService(ctx, web))
	must(t, f.DeleteService(ctx, web)) // absent: not an error
	if got := f.Connect(TCP, netip.MustParseAddrPort("198.18.0.10:80")); got.String() != "198.18.0.10:80" {
		t.Errorf("after delete, connect reaches %s, want the VIP itself", got)
	}
	svcs, err := f.Services(ctx)
	must(t, err)
	if len(svcs) != 1 || svcs[dns].String() != "198.19.1.3:5353" {
		t.Errorf("Services() = %v, want only %s", svcs, dns)
	}
}

func TestValidate(t *testing.T) {
	vip := netip.MustParseAddr("198.18.0.10")
	backend := netip.MustParseAddrPort("198.19.1.2:8080")
	tests := []struct {
		name    string
		svc     Service
		backend netip.AddrPort
		wantErr string
	}{
		{"IPv6 VIP", Service{VIP: netip.MustParseAddr("2001:db8:18::10"), Port: 80, Protocol: TCP}, backend, "not an IPv4 address"},
		{"port 0", Service{VIP: vip, Port: 0, Protocol: TCP}, backend, "port: must not be 0"},
		{"SCTP", Service{VIP: vip, Port: 80, Protocol: 132}, backend, "protocol 132"},
		{"IPv6 backend", Service{VIP: vip, Port: 80, Protocol: TCP}, netip.MustParseAddrPort("[2001:db8:19::2]:80"), "backend"},
		{"backend port 0", Service{VIP: vip, Port: 80, Protocol: TCP}, netip.MustParseAddrPort("198.19.1.2:0"), "port must not be 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := NewFake().SetService(context.Background(), tt.svc, tt.backend)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("SetService(%s, %s) = %v, want an error containing %q", tt.svc, tt.backend, err, tt.wantErr)
			}
		})
	}
}

// TestKeyEncoding pins the map's byte layout that connect4 builds on its stack:
// address and port in network byte order, then the protocol and a zero byte.
func TestKeyEncoding(t *testing.T) {
	svc := Service{VIP: netip.MustParseAddr("198.18.0.10"), Port: 0x1f90, Protocol: UDP}
	k := encodeKey(svc)
	want := mapKey{IP: [4]byte{198, 18, 0, 10}, Port: [2]byte{0x1f, 0x90}, Protocol: 17}
	if k != want {
		t.Errorf("encodeKey(%s) = %v, want %v", svc, k, want)
	}
	if got := decodeKey(k); got != svc {
		t.Errorf("decodeKey(encodeKey(%s)) = %s", svc, got)
	}
	b := netip.MustParseAddrPort("198.19.1.2:8080")
	if got := decodeValue(encodeValue(b)); got != b {
		t.Errorf("decodeValue(encodeValue(%s)) = %s", b, got)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
