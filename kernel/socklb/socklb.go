package socklb

import (
	"context"
	"fmt"
	"net/netip"
	"time"
)

// Protocol is an IP protocol number as the hooks see it in bpf_sock_addr's
// protocol field.
type Protocol uint8

// The protocols a Service port can have that the hooks balance.
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
	VIP      netip.Addr // IPv4 or IPv6 (never an IPv4-mapped IPv6 address)
	Port     uint16
	Protocol Protocol
}

func (s Service) String() string {
	return fmt.Sprintf("%s/%s", netip.AddrPortFrom(s.VIP, s.Port), s.Protocol)
}

// Entry is what the hooks do with a Service's connections.
type Entry struct {
	// Backends in slot order, each of the VIP's family. Empty: the Service
	// has no usable endpoint; the program leaves the destination alone and
	// the nftables path beside it rejects the connection (ECONNREFUSED, as
	// kube-proxy's REJECT does).
	Backends []netip.AddrPort

	// AffinityTimeout > 0: ClientIP affinity, keyed by the client's
	// network-namespace cookie (bpf_get_netns_cookie), as Cilium does; 0:
	// none. Whole seconds, as Kubernetes' sessionAffinityConfig has them.
	AffinityTimeout time.Duration
}

// Interface is the socket-LB boundary: the maps of the programs attached to
// one cgroup. Kernel is the real one; Fake keeps the maps in memory and
// answers what the programs would decide.
type Interface interface {
	// SetService adds or replaces one Service: per-element map updates
	// (backend slots first, then the service element with the new count,
	// then stale slots deleted), never a reload; connect() in flight sees
	// either the old or the new set.
	SetService(ctx context.Context, svc Service, e Entry) error

	// DeleteService removes svc: connect() to it is no longer translated.
	// Deleting an absent Service is not an error.
	DeleteService(ctx context.Context, svc Service) error

	// Services returns every Service with its Entry.
	Services(ctx context.Context) (map[Service]Entry, error)
}

// MaxBackends bounds one Service's backends: slots are numbered in a u32, but
// a Service with more endpoints than this is a mistake worth an error.
const MaxBackends = 1 << 16

// validate checks a Service (and its Entry, when e is not nil) the way both
// Kernel and Fake accept them, naming the field at fault.
func validate(svc Service, e *Entry) error {
	if !svc.VIP.IsValid() || svc.VIP.Is4In6() || svc.VIP.Zone() != "" {
		return fmt.Errorf("service %s: VIP %q: not an IPv4 or IPv6 address", svc, svc.VIP)
	}
	if svc.Port == 0 {
		return fmt.Errorf("service %s: port: must not be 0", svc)
	}
	if svc.Protocol != TCP && svc.Protocol != UDP {
		return fmt.Errorf("service %s: protocol %d: only TCP (6) or UDP (17)", svc, svc.Protocol)
	}
	if e == nil {
		return nil
	}
	if len(e.Backends) > MaxBackends {
		return fmt.Errorf("service %s: backends: %d, more than %d", svc, len(e.Backends), MaxBackends)
	}
	for i, b := range e.Backends {
		if b.Addr().Is4() != svc.VIP.Is4() || b.Addr().Is4In6() || b.Addr().Zone() != "" {
			return fmt.Errorf("service %s: backends[%d] %s: not an address of the VIP's family", svc, i, b)
		}
		if b.Port() == 0 {
			return fmt.Errorf("service %s: backends[%d] %s: port must not be 0", svc, i, b)
		}
	}
	if e.AffinityTimeout < 0 || e.AffinityTimeout%time.Second != 0 {
		return fmt.Errorf("service %s: affinity timeout %s: not a whole number of seconds >= 0", svc, e.AffinityTimeout)
	}
	return nil
}
