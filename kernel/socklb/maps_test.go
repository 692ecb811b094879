package socklb

import (
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// TestLayout pins the maps' byte layouts the programs build and read: the
// structs' sizes and offsets are the constants program.go uses.
func TestLayout(t *testing.T) {
	var k svcKey
	var v svcValue
	var bk backendKey
	var bv backendValue
	var rk revKey
	var ak affKey
	var av affValue
	tests := []struct {
		name      string
		got, want uintptr
	}{
		{"svcKey size", unsafe.Sizeof(k), svcKeySize},
		{"svcKey.Port", unsafe.Offsetof(k.Port), svcKeyPort},
		{"svcKey.Protocol", unsafe.Offsetof(k.Protocol), svcKeyProtocol},
		{"svcValue size", unsafe.Sizeof(v), svcValueSize},
		{"svcValue.ID", unsafe.Offsetof(v.ID), svcValueID},
		{"svcValue.Count", unsafe.Offsetof(v.Count), svcValueCount},
		{"svcValue.Flags", unsafe.Offsetof(v.Flags), svcValueFlags},
		{"svcValue.AffinityTimeout", unsafe.Offsetof(v.AffinityTimeout), svcValueTimeout},
		{"backendKey size", unsafe.Sizeof(bk), backendKeySize},
		{"backendKey.Slot", unsafe.Offsetof(bk.Slot), backendKeySlot},
		{"backendValue size", unsafe.Sizeof(bv), backendValueSize},
		{"backendValue.Port", unsafe.Offsetof(bv.Port), backendValuePort},
		{"revKey size", unsafe.Sizeof(rk), revKeySize},
		{"revKey.Addr", unsafe.Offsetof(rk.Addr), revKeyAddr},
		{"affKey size", unsafe.Sizeof(ak), affKeySize},
		{"affKey.ID", unsafe.Offsetof(ak.ID), affKeyID},
		{"affValue size", unsafe.Sizeof(av), affValueSize},
		{"affValue.Slot", unsafe.Offsetof(av.Slot), affValueSlot},
		{"affValue.Addr", unsafe.Offsetof(av.Addr), affValueAddr},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %d, want %d", tt.name, tt.got, tt.want)
		}
	}
}

// TestKeyEncoding: IPv4 in its IPv4-mapped form, ports in network order.
func TestKeyEncoding(t *testing.T) {
	svc := Service{VIP: netip.MustParseAddr("198.18.0.10"), Port: 0x1f90, Protocol: UDP}
	k := encodeSvcKey(svc)
	want := svcKey{Addr: [16]byte{10: 0xff, 11: 0xff, 12: 198, 13: 18, 14: 0, 15: 10}, Port: [2]byte{0x1f, 0x90}, Protocol: 17}
	if k != want {
		t.Errorf("encodeSvcKey(%s) = %v, want %v", svc, k, want)
	}
	if got := decodeSvcKey(k); got != svc {
		t.Errorf("decodeSvcKey(encodeSvcKey(%s)) = %s", svc, got)
	}
	for _, b := range []string{"198.19.1.2:8080", "[2001:db8:19::2]:8080"} {
		if got := decodeBackend(encodeBackend(netip.MustParseAddrPort(b))); got.String() != b {
			t.Errorf("decodeBackend(encodeBackend(%s)) = %s", b, got)
		}
	}
	v := encodeSvcValue(7, Entry{Backends: make([]netip.AddrPort, 3), AffinityTimeout: 10 * time.Second})
	if v.ID != 7 || v.Count != 3 || v.Flags != flagAffinity || v.AffinityTimeout != 10e9 || v.affinity() != 10*time.Second {
		t.Errorf("encodeSvcValue = %+v", v)
	}
	// The first port byte is the high one: what a little-endian 2-byte store
	// of user_port's low half writes.
	bv := encodeBackend(netip.MustParseAddrPort("198.19.1.2:8080"))
	if got := binary.LittleEndian.Uint16(bv.Port[:]); got != 0x901f {
		t.Errorf("port bytes as a little-endian u16 = %#x, want 0x901f", got)
	}
}

// TestConfigErrors: a Config missing what New or Cleanup needs is refused,
// naming the field, before anything touches the kernel.
func TestConfigErrors(t *testing.T) {
	if _, err := New(Config{PinPath: "/sys/fs/bpf/svcproxy"}); err == nil || !strings.Contains(err.Error(), "CgroupPath: must not be empty") {
		t.Errorf("New without CgroupPath = %v, want an error naming CgroupPath", err)
	}
	if err := Cleanup(Config{CgroupPath: "/sys/fs/cgroup"}); err == nil || !strings.Contains(err.Error(), "PinPath: must not be empty") {
		t.Errorf("Cleanup without PinPath = %v, want an error naming PinPath", err)
	}
}
