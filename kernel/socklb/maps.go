package socklb

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
)

// The maps' layouts, byte for byte as the programs read and build them.
// Addresses are 16 bytes for both families, an IPv4 address in its
// IPv4-mapped form (::ffff:a.b.c.d, RFC 4291 2.5.5.2), so one set of maps
// serves connect4 and connect6 (see doc.go). Addresses and ports are in
// network byte order, as bpf_sock_addr holds them (include/uapi/linux/bpf.h:
// "Stored in network byte order"). Every struct is laid out without implicit
// padding, so its Go layout is its map layout.

// svcKey is the services map's key: (VIP, port, protocol).
type svcKey struct {
	Addr     [16]byte
	Port     [2]byte
	Protocol uint8
	_        uint8 // zero: the programs store a zero here too
}

// svcValue is the services map's value.
type svcValue struct {
	ID    uint32 // the Service's number: the first half of its backends' keys
	Count uint32 // backends in slots 0..Count-1; 0: leave connect() alone
	Flags uint32 // flagAffinity
	_     uint32
	// AffinityTimeout is ClientIP affinity's timeout in nanoseconds, the
	// unit of bpf_ktime_get_ns.
	AffinityTimeout uint64
}

// flagAffinity marks a Service with ClientIP affinity.
const flagAffinity = 1 << 0

// backendKey is the backends map's key: (service ID, slot).
type backendKey struct {
	ID   uint32
	Slot uint32
}

// backendValue is the backends map's value: an address and port. The port's
// two bytes are followed by two zero bytes, so a 4-byte load of them is what
// bpf_sock_addr's user_port holds.
type backendValue struct {
	Addr [16]byte
	Port [2]byte
	_    [2]byte
}

// revKey is the reverse-translation map's key: a socket (its cookie,
// bpf_get_socket_cookie: unique per socket for the whole boot, never reused)
// and the backend address and port connect() or sendmsg() sent it to. The
// port's two bytes are followed by six zero bytes, so the key is 32 bytes
// with the cookie 8-byte aligned, as Cilium's ipv4_revnat_tuple.
type revKey struct {
	Cookie uint64
	Addr   [16]byte
	Port   [2]byte
	_      [6]byte
}

// revValue is the reverse-translation map's value: the Service address and
// port the socket asked for, laid out as a backendValue (an address, a port,
// two zero bytes), so the same instructions write either into the context.
type revValue = backendValue

// affKey is the affinity map's key: a client's network namespace (its
// cookie, bpf_get_netns_cookie: a pod) and a Service's ID, as Cilium's
// lb4_affinity_key with its netns flag set.
type affKey struct {
	NetnsCookie uint64
	ID          uint32
	_           uint32
}

// affValue is the affinity map's value: which backend the namespace last
// reached, as a slot and, to notice that the slot holds another backend
// since, the backend's address and port; and when, in bpf_ktime_get_ns
// nanoseconds (CLOCK_MONOTONIC).
type affValue struct {
	LastUsed uint64
	Slot     uint32
	_        uint32
	Addr     [16]byte
	Port     [2]byte
	_        [6]byte
}

// The offsets the programs use, checked against the structs by a test.
const (
	svcKeySize        = 20
	svcKeyPort        = 16
	svcKeyProtocol    = 18
	svcKeyPad         = 19
	svcValueSize      = 24
	svcValueID        = 0
	svcValueCount     = 4
	svcValueFlags     = 8
	svcValueTimeout   = 16
	backendKeySize    = 8
	backendKeySlot    = 4
	backendValueSize  = 20
	backendValuePort  = 16
	revKeySize        = 32
	revKeyAddr        = 8
	revValueSize      = backendValueSize
	affKeySize        = 16
	affKeyID          = 8
	affValueSize      = 40
	affValueSlot      = 8
	affValueAddr      = 16
	defaultMaxService = 65536
)

// mapSpecs returns the specs of the maps, sized for maxServices Services
// with on average 16 backends each, 4 reverse-translation entries and 4
// affinity entries per Service. The names are what bpftool map shows (and, with pinning, the
// files in the pin directory).
func mapSpecs(maxServices uint32) (services, backends, revnat, affinity *ebpf.MapSpec) {
	services = &ebpf.MapSpec{
		Name: "svcp_services", Type: ebpf.Hash,
		KeySize: svcKeySize, ValueSize: svcValueSize, MaxEntries: maxServices,
	}
	backends = &ebpf.MapSpec{
		Name: "svcp_backends", Type: ebpf.Hash,
		KeySize: backendKeySize, ValueSize: backendValueSize, MaxEntries: maxServices * 16,
	}
	// An LRU hash, as Cilium's cilium_lb4_reverse_sk: an entry is written
	// for every translated connect() and sendmsg() and never deleted (the
	// programs cannot see a socket close); the least recently used go when
	// it is full. A socket whose entry went answers recvmsg() and
	// getpeername() with the backend's address instead of the Service's.
	revnat = &ebpf.MapSpec{
		Name: "svcp_revnat", Type: ebpf.LRUHash,
		KeySize: revKeySize, ValueSize: revValueSize, MaxEntries: maxServices * 4,
	}
	// An LRU hash too, as Cilium's cilium_lb4_affinity: an entry is
	// refreshed by every connect() that uses it and never deleted; an
	// expired one is overwritten by the next connect() from its namespace,
	// and the least recently used make room when it is full.
	affinity = &ebpf.MapSpec{
		Name: "svcp_affinity", Type: ebpf.LRUHash,
		KeySize: affKeySize, ValueSize: affValueSize, MaxEntries: maxServices * 4,
	}
	return services, backends, revnat, affinity
}

// addr16 is a's map form: IPv4 as IPv4-mapped IPv6.
func addr16(a netip.Addr) [16]byte { return a.As16() }

// addrFrom16 is the inverse of addr16.
func addrFrom16(b [16]byte) netip.Addr { return netip.AddrFrom16(b).Unmap() }

func encodeSvcKey(svc Service) svcKey {
	k := svcKey{Addr: addr16(svc.VIP), Protocol: uint8(svc.Protocol)}
	binary.BigEndian.PutUint16(k.Port[:], svc.Port)
	return k
}

func decodeSvcKey(k svcKey) Service {
	return Service{
		VIP:      addrFrom16(k.Addr),
		Port:     binary.BigEndian.Uint16(k.Port[:]),
		Protocol: Protocol(k.Protocol),
	}
}

func encodeSvcValue(id uint32, e Entry) svcValue {
	v := svcValue{ID: id, Count: uint32(len(e.Backends))}
	if e.AffinityTimeout > 0 {
		v.Flags |= flagAffinity
		v.AffinityTimeout = uint64(e.AffinityTimeout)
	}
	return v
}

func (v svcValue) affinity() time.Duration {
	if v.Flags&flagAffinity == 0 {
		return 0
	}
	return time.Duration(v.AffinityTimeout)
}

func encodeBackend(b netip.AddrPort) backendValue {
	v := backendValue{Addr: addr16(b.Addr())}
	binary.BigEndian.PutUint16(v.Port[:], b.Port())
	return v
}

func decodeBackend(v backendValue) netip.AddrPort {
	return netip.AddrPortFrom(addrFrom16(v.Addr), binary.BigEndian.Uint16(v.Port[:]))
}
