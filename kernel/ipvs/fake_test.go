package ipvs

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
)

var (
	vip = Key{Protocol: TCP, Addr: netip.MustParseAddrPort("198.18.0.10:80")}
	rs1 = netip.MustParseAddrPort("198.19.1.2:8080")
)

func TestFakeRefusesWhatTheKernelRefuses(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		op   func(f *Fake) error
		want string // substring, or a sentinel below
		is   error
	}{
		{"duplicate virtual server", func(f *Fake) error {
			return f.AddVirtualServer(ctx, VirtualServer{Key: vip, Scheduler: "rr"})
		}, "", ErrExist},
		{"unknown scheduler", func(f *Fake) error {
			return f.AddVirtualServer(ctx, VirtualServer{Key: Key{Protocol: TCP, Addr: netip.MustParseAddrPort("198.18.0.11:80")}, Scheduler: "fast"})
		}, `scheduler "fast"`, nil},
		{"bad protocol", func(f *Fake) error {
			return f.AddVirtualServer(ctx, VirtualServer{Key: Key{Protocol: "ICMP", Addr: vip.Addr}, Scheduler: "rr"})
		}, `protocol "ICMP"`, nil},
		{"persistence without timeout", func(f *Fake) error {
			return f.UpdateVirtualServer(ctx, VirtualServer{Key: vip, Scheduler: "rr", Persistent: true})
		}, "persistence needs", nil},
		{"missing virtual server", func(f *Fake) error {
			return f.DeleteVirtualServer(ctx, Key{Protocol: UDP, Addr: vip.Addr})
		}, "", ErrNotExist},
		{"duplicate real server", func(f *Fake) error {
			return f.AddRealServer(ctx, vip, RealServer{Addr: rs1, Weight: 1})
		}, "", ErrExist},
		{"family mismatch", func(f *Fake) error {
			return f.AddRealServer(ctx, vip, RealServer{Addr: netip.MustParseAddrPort("[2001:db8::1]:80"), Weight: 1})
		}, "address family", nil},
		{"negative weight", func(f *Fake) error {
			return f.UpdateRealServer(ctx, vip, RealServer{Addr: rs1, Weight: -1})
		}, "weight -1", nil},
		{"missing real server", func(f *Fake) error {
			return f.DeleteRealServer(ctx, vip, netip.MustParseAddrPort("198.19.1.9:8080"))
		}, "", ErrNotExist},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFake()
			if err := f.AddVirtualServer(ctx, VirtualServer{Key: vip, Scheduler: "rr"}); err != nil {
				t.Fatal(err)
			}
			if err := f.AddRealServer(ctx, vip, RealServer{Addr: rs1, Weight: 1}); err != nil {
				t.Fatal(err)
			}
			before := f.Dump()
			err := tc.op(f)
			switch {
			case err == nil:
				t.Fatal("no error")
			case tc.is != nil && !errors.Is(err, tc.is):
				t.Errorf("error %v, want %v", err, tc.is)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Errorf("error %v, want it to contain %q", err, tc.want)
			}
			if after := f.Dump(); after != before {
				t.Errorf("a refused call changed the state:\n%s\nwas:\n%s", after, before)
			}
		})
	}
}

func TestFakeLifecycle(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	steps := []func() error{
		func() error {
			return f.AddVirtualServer(ctx, VirtualServer{Key: vip, Scheduler: "rr", Persistent: true, Timeout: time.Hour})
		},
		func() error { return f.AddRealServer(ctx, vip, RealServer{Addr: rs1, Weight: 2}) },
		func() error { return f.SetConns(vip, rs1, 3, 4) },
		func() error {
			return f.AddVirtualServer(ctx, VirtualServer{Key: Key{Protocol: UDP, Addr: netip.MustParseAddrPort("[2001:db8::10]:53")}, Scheduler: "sh"})
		},
	}
	for i, s := range steps {
		if err := s(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	want := `Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  198.18.0.10:80 rr persistent 3600
  -> 198.19.1.2:8080              Masq    2      3          4
UDP  [2001:db8::10]:53 sh
`
	if got := f.Dump(); got != want {
		t.Errorf("Dump:\n%s\nwant:\n%s", got, want)
	}
	if err := f.DeleteVirtualServer(ctx, vip); err != nil {
		t.Fatal(err)
	}
	if _, err := f.RealServers(ctx, vip); !errors.Is(err, ErrNotExist) {
		t.Errorf("RealServers of a deleted virtual server: %v, want ErrNotExist", err)
	}
}

func TestAvailableSaysWhy(t *testing.T) {
	err := Available()
	if err == nil {
		t.Skip("this kernel has IPVS")
	}
	if !strings.Contains(err.Error(), "/proc/net/ip_vs") || !strings.Contains(err.Error(), "kernel has no IPVS") {
		t.Errorf("Available() = %v, want the missing file and the reason", err)
	}
}
