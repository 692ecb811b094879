package socklb

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
)

// Protocol is an IP protocol number as the hook sees it in bpf_sock_addr's
// protocol field.
type Protocol uint8

// The protocols a Service port can have that connect() balances.
const (
	TCP Protocol = 6  // IPPROTO_TCP
	UDP Protocol = 17 // IPPROTO_UDP
)

func (p Protocol) String() string {
	switch p {
	case TCP:
		return "TCP"
	case UDP:
		return "UDP"
	}
	return fmt.Sprintf("protocol(%d)", uint8(p))
}

// Service is a key of the services map: a Service port as a client connects
// to it.
type Service struct {
	VIP      netip.Addr // IPv4 (connect4 only in this step)
	Port     uint16
	Protocol Protocol
}

func (s Service) String() string {
	return fmt.Sprintf("%s/%s", netip.AddrPortFrom(s.VIP, s.Port), s.Protocol)
}

// Interface is the socket-LB boundary: the services map of a program attached
// to one cgroup. Kernel is the real one; Fake keeps the map in memory.
type Interface interface {
	// SetService makes connect() to svc go to backend instead (adds or
	// replaces one map element; never a reload).
	SetService(ctx context.Context, svc Service, backend netip.AddrPort) error

	// DeleteService removes svc's element: connect() to it is no longer
	// translated. Deleting an absent Service is not an error.
	DeleteService(ctx context.Context, svc Service) error

	// Services returns the map's elements.
	Services(ctx context.Context) (map[Service]netip.AddrPort, error)
}

// mapKey is the services map's key, byte for byte as program.go builds it on
// the stack: addresses and ports in network byte order, as bpf_sock_addr holds
// them (include/uapi/linux/bpf.h: "Stored in network byte order").
type mapKey struct {
	IP       [4]byte
	Port     [2]byte
	Protocol uint8
	_        uint8 // zero: the program stores a zero here too
}

// mapValue is the services map's value: the backend.
type mapValue struct {
	IP   [4]byte
	Port [2]byte
	_    [2]byte
}

const (
	keySize   = 8
	valueSize = 8
)

// validate checks a Service and backend the way both Kernel and Fake accept
// them, naming the field at fault.
func validate(svc Service, backend *netip.AddrPort) error {
	if !svc.VIP.Is4() {
		return fmt.Errorf("service %s: VIP %q: not an IPv4 address (connect4 only)", svc, svc.VIP)
	}
	if svc.Port == 0 {
		return fmt.Errorf("service %s: port: must not be 0", svc)
	}
	if svc.Protocol != TCP && svc.Protocol != UDP {
		return fmt.Errorf("service %s: protocol %d: only TCP (6) or UDP (17)", svc, svc.Protocol)
	}
	if backend != nil {
		if !backend.Addr().Is4() {
			return fmt.Errorf("service %s: backend %s: not an IPv4 address", svc, backend)
		}
		if backend.Port() == 0 {
			return fmt.Errorf("service %s: backend %s: port must not be 0", svc, backend)
		}
	}
	return nil
}

func encodeKey(svc Service) mapKey {
	k := mapKey{IP: svc.VIP.As4(), Protocol: uint8(svc.Protocol)}
	binary.BigEndian.PutUint16(k.Port[:], svc.Port)
	return k
}

func decodeKey(k mapKey) Service {
	return Service{
		VIP:      netip.AddrFrom4(k.IP),
		Port:     binary.BigEndian.Uint16(k.Port[:]),
		Protocol: Protocol(k.Protocol),
	}
}

func encodeValue(b netip.AddrPort) mapValue {
	v := mapValue{IP: b.Addr().As4()}
	binary.BigEndian.PutUint16(v.Port[:], b.Port())
	return v
}

func decodeValue(v mapValue) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4(v.IP), binary.BigEndian.Uint16(v.Port[:]))
}
