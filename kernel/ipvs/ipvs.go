package ipvs

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// Protocol is the transport protocol of a virtual server.
type Protocol string

// The protocols IPVS balances.
const (
	TCP  Protocol = "TCP"
	UDP  Protocol = "UDP"
	SCTP Protocol = "SCTP"
)

// Schedulers are the scheduler names svcproxy offers, as the kernel modules
// ip_vs_<name> register them (ipvsadm(8), "-s scheduler").
var Schedulers = []string{"rr", "wrr", "lc", "wlc", "sh", "dh", "sed", "nq"}

// ValidScheduler reports whether name is one of Schedulers.
func ValidScheduler(name string) bool {
	for _, s := range Schedulers {
		if s == name {
			return true
		}
	}
	return false
}

// Errors the Interface returns (wrapped) when an object is missing or already there.
var (
	ErrNotExist = errors.New("does not exist")
	ErrExist    = errors.New("already exists")
)

// Key names a virtual server: protocol and address:port.
type Key struct {
	Protocol Protocol
	Addr     netip.AddrPort
}

// String is the ipvsadm form: "TCP 198.18.0.10:80".
func (k Key) String() string { return fmt.Sprintf("%s %s", k.Protocol, k.Addr) }

// VirtualServer is one IPVS service.
type VirtualServer struct {
	Key
	// Scheduler is one of Schedulers.
	Scheduler string
	// Persistent sends every connection of one client address to the same real server
	// for Timeout after its last connection ends: Kubernetes' ClientIP affinity.
	Persistent bool
	Timeout    time.Duration
	// Stats are read from the kernel; ignored when writing.
	Stats Stats
}

// RealServer is one backend of a virtual server.
type RealServer struct {
	Addr netip.AddrPort
	// Weight is the share of new connections; 0 takes none (a draining server).
	Weight int
	// ActiveConns and InactiveConns are read from the kernel: connections in
	// ESTABLISHED, and in any other state (SYN_RECV, FIN_WAIT, TIME_WAIT, UDP).
	ActiveConns   int
	InactiveConns int
	Stats         Stats
}

// Stats are the counters of a virtual or real server. The kernel updates its rate
// estimators every 2 seconds, so counters read right after traffic may lag.
type Stats struct {
	Connections uint32
	PacketsIn   uint32
	PacketsOut  uint32
	BytesIn     uint64
	BytesOut    uint64
}

// Timeouts are the kernel-wide connection timeouts of IPVS (ipvsadm --set).
// A zero field means "leave as is" when writing.
type Timeouts struct {
	TCP    time.Duration
	TCPFin time.Duration
	UDP    time.Duration
}

// Interface is IPVS in one network namespace. Implementations are safe for
// concurrent use.
type Interface interface {
	// VirtualServers lists every virtual server, with its stats.
	VirtualServers(ctx context.Context) ([]VirtualServer, error)
	AddVirtualServer(ctx context.Context, vs VirtualServer) error
	// UpdateVirtualServer changes the scheduler and persistence of an existing one.
	UpdateVirtualServer(ctx context.Context, vs VirtualServer) error
	// DeleteVirtualServer deletes a virtual server and its real servers.
	DeleteVirtualServer(ctx context.Context, k Key) error

	// RealServers lists the real servers of a virtual server, with their counters.
	RealServers(ctx context.Context, k Key) ([]RealServer, error)
	AddRealServer(ctx context.Context, k Key, rs RealServer) error
	// UpdateRealServer changes the weight of an existing real server.
	UpdateRealServer(ctx context.Context, k Key, rs RealServer) error
	DeleteRealServer(ctx context.Context, k Key, addr netip.AddrPort) error

	Timeouts(ctx context.Context) (Timeouts, error)
	SetTimeouts(ctx context.Context, t Timeouts) error
}

// validate checks what the kernel would refuse with a bare EINVAL, so the error can say
// which field is wrong.
func (vs VirtualServer) validate() error {
	if err := vs.Key.validate(); err != nil {
		return err
	}
	if !ValidScheduler(vs.Scheduler) {
		return fmt.Errorf("virtual server %s: scheduler %q: not one of %v", vs.Key, vs.Scheduler, Schedulers)
	}
	if vs.Persistent && (vs.Timeout < time.Second || vs.Timeout > maxPersistence) {
		return fmt.Errorf("virtual server %s: timeout %s: persistence needs 1s to %s", vs.Key, vs.Timeout, maxPersistence)
	}
	return nil
}

// maxPersistence is the longest persistence timeout: the kernel keeps it in seconds in
// a 32-bit field, but Kubernetes caps sessionAffinityConfig at 86400 s.
const maxPersistence = 86400 * time.Second

func (k Key) validate() error {
	switch k.Protocol {
	case TCP, UDP, SCTP:
	default:
		return fmt.Errorf("virtual server %s: protocol %q: not TCP, UDP or SCTP", k, k.Protocol)
	}
	if !k.Addr.Addr().IsValid() || k.Addr.Addr().Is4In6() || k.Addr.Port() == 0 {
		return fmt.Errorf("virtual server %s: address: want an IPv4 or IPv6 address and a port", k)
	}
	return nil
}

func (rs RealServer) validate(k Key) error {
	a := rs.Addr.Addr()
	if !a.IsValid() || a.Is4In6() || rs.Addr.Port() == 0 {
		return fmt.Errorf("virtual server %s: real server %s: address: want an IP address and a port", k, rs.Addr)
	}
	// Masquerading rewrites only the destination, so both sides share a family.
	if a.Is4() != k.Addr.Addr().Is4() {
		return fmt.Errorf("virtual server %s: real server %s: address: not the virtual server's address family", k, rs.Addr)
	}
	if rs.Weight < 0 || rs.Weight > maxWeight {
		return fmt.Errorf("virtual server %s: real server %s: weight %d: not in 0..%d", k, rs.Addr, rs.Weight, maxWeight)
	}
	return nil
}

// maxWeight is the largest weight the kernel accepts (INT_MAX in ip_vs_ctl.c).
const maxWeight = 1<<31 - 1
