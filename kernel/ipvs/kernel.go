package ipvs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/moby/ipvs"
)

// Kernel is the Interface on the running kernel, through one generic netlink socket.
type Kernel struct {
	// mu serialises requests: moby/ipvs matches replies by sequence number but reads
	// them from one socket, so two requests in flight could steal each other's reply.
	mu sync.Mutex
	h  *ipvs.Handle
}

var _ Interface = (*Kernel)(nil)

// New opens IPVS in the network namespace of the calling OS thread (lock the thread
// with runtime.LockOSThread when switching namespaces). It fails with Available's
// reason when the kernel has no IPVS. Close releases the socket.
func New() (*Kernel, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	h, err := ipvs.New("")
	if err != nil {
		return nil, fmt.Errorf("ipvs: open generic netlink socket: %w", err)
	}
	return &Kernel{h: h}, nil
}

// Close releases the netlink socket.
func (k *Kernel) Close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.h.Close()
}

// do runs one request under the lock, after checking ctx: netlink requests cannot be
// cancelled once sent, but the socket has send and receive timeouts.
func (k *Kernel) do(ctx context.Context, what string, fn func(h *ipvs.Handle) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ipvs: %s: %w", what, err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := fn(k.h); err != nil {
		return fmt.Errorf("ipvs: %s: %w", what, mapErrno(err))
	}
	return nil
}

// mapErrno adds ErrExist or ErrNotExist to the kernel's errno: ip_vs_ctl.c answers
// EEXIST for a duplicate, ESRCH for a missing service and ENOENT for a missing
// destination.
func mapErrno(err error) error {
	switch {
	case errors.Is(err, syscall.EEXIST):
		return fmt.Errorf("%w (%w)", ErrExist, err)
	case errors.Is(err, syscall.ESRCH), errors.Is(err, syscall.ENOENT):
		return fmt.Errorf("%w (%w)", ErrNotExist, err)
	}
	return err
}

// VirtualServers implements Interface.
func (k *Kernel) VirtualServers(ctx context.Context) ([]VirtualServer, error) {
	var out []VirtualServer
	err := k.do(ctx, "list virtual servers", func(h *ipvs.Handle) error {
		svcs, err := h.GetServices()
		if err != nil {
			return err
		}
		for _, s := range svcs {
			if s.FWMark != 0 {
				continue // firewall-mark services are not svcproxy's kind
			}
			vs, err := fromService(s)
			if err != nil {
				return err
			}
			out = append(out, vs)
		}
		return nil
	})
	return out, err
}

// AddVirtualServer implements Interface.
func (k *Kernel) AddVirtualServer(ctx context.Context, vs VirtualServer) error {
	if err := vs.validate(); err != nil {
		return err
	}
	return k.do(ctx, "add virtual server "+vs.Key.String(), func(h *ipvs.Handle) error {
		return h.NewService(toService(vs))
	})
}

// UpdateVirtualServer implements Interface.
func (k *Kernel) UpdateVirtualServer(ctx context.Context, vs VirtualServer) error {
	if err := vs.validate(); err != nil {
		return err
	}
	return k.do(ctx, "update virtual server "+vs.Key.String(), func(h *ipvs.Handle) error {
		return h.UpdateService(toService(vs))
	})
}

// DeleteVirtualServer implements Interface.
func (k *Kernel) DeleteVirtualServer(ctx context.Context, key Key) error {
	if err := key.validate(); err != nil {
		return err
	}
	return k.do(ctx, "delete virtual server "+key.String(), func(h *ipvs.Handle) error {
		return h.DelService(toService(VirtualServer{Key: key}))
	})
}

// RealServers implements Interface.
func (k *Kernel) RealServers(ctx context.Context, key Key) ([]RealServer, error) {
	if err := key.validate(); err != nil {
		return nil, err
	}
	var out []RealServer
	err := k.do(ctx, "list real servers of "+key.String(), func(h *ipvs.Handle) error {
		// GET_DEST of a missing service is an empty list, not ESRCH; ask first.
		if !h.IsServicePresent(toService(VirtualServer{Key: key})) {
			return syscall.ESRCH
		}
		dsts, err := h.GetDestinations(toService(VirtualServer{Key: key}))
		if err != nil {
			return err
		}
		for _, d := range dsts {
			a, ok := netip.AddrFromSlice(d.Address)
			if !ok {
				return fmt.Errorf("real server address %v: not an IP address", d.Address)
			}
			out = append(out, RealServer{
				Addr:          netip.AddrPortFrom(a.Unmap(), d.Port),
				Weight:        d.Weight,
				ActiveConns:   d.ActiveConnections,
				InactiveConns: d.InactiveConnections,
				Stats:         fromStats(ipvs.SvcStats(d.Stats)),
			})
		}
		return nil
	})
	return out, err
}

// AddRealServer implements Interface.
func (k *Kernel) AddRealServer(ctx context.Context, key Key, rs RealServer) error {
	return k.realServer(ctx, "add", key, rs, (*ipvs.Handle).NewDestination)
}

// UpdateRealServer implements Interface.
func (k *Kernel) UpdateRealServer(ctx context.Context, key Key, rs RealServer) error {
	return k.realServer(ctx, "update", key, rs, (*ipvs.Handle).UpdateDestination)
}

// DeleteRealServer implements Interface.
func (k *Kernel) DeleteRealServer(ctx context.Context, key Key, addr netip.AddrPort) error {
	return k.realServer(ctx, "delete", key, RealServer{Addr: addr}, (*ipvs.Handle).DelDestination)
}

func (k *Kernel) realServer(ctx context.Context, verb string, key Key, rs RealServer,
	fn func(*ipvs.Handle, *ipvs.Service, *ipvs.Destination) error) error {
	if err := key.validate(); err != nil {
		return err
	}
	if err := rs.validate(key); err != nil {
		return err
	}
	what := fmt.Sprintf("%s real server %s of %s", verb, rs.Addr, key)
	return k.do(ctx, what, func(h *ipvs.Handle) error {
		return fn(h, toService(VirtualServer{Key: key}), &ipvs.Destination{
			Address:         net.IP(rs.Addr.Addr().AsSlice()),
			Port:            rs.Addr.Port(),
			Weight:          rs.Weight,
			ConnectionFlags: ipvs.ConnectionFlagMasq,
			AddressFamily:   family(rs.Addr.Addr()),
		})
	})
}

// Timeouts implements Interface.
func (k *Kernel) Timeouts(ctx context.Context) (Timeouts, error) {
	var t Timeouts
	err := k.do(ctx, "get timeouts", func(h *ipvs.Handle) error {
		c, err := h.GetConfig()
		if err != nil {
			return err
		}
		t = Timeouts{TCP: c.TimeoutTCP, TCPFin: c.TimeoutTCPFin, UDP: c.TimeoutUDP}
		return nil
	})
	return t, err
}

// SetTimeouts implements Interface.
func (k *Kernel) SetTimeouts(ctx context.Context, t Timeouts) error {
	return k.do(ctx, "set timeouts", func(h *ipvs.Handle) error {
		return h.SetConfig(&ipvs.Config{TimeoutTCP: t.TCP, TimeoutTCPFin: t.TCPFin, TimeoutUDP: t.UDP})
	})
}

// Flags and constants of include/uapi/linux/ip_vs.h.
const (
	flagPersistent = 0x0001 // IP_VS_SVC_F_PERSISTENT
	afInet         = syscall.AF_INET
	afInet6        = syscall.AF_INET6
)

var protoNumbers = map[Protocol]uint16{TCP: syscall.IPPROTO_TCP, UDP: syscall.IPPROTO_UDP, SCTP: 132}

func family(a netip.Addr) uint16 {
	if a.Is4() {
		return afInet
	}
	return afInet6
}

func toService(vs VirtualServer) *ipvs.Service {
	a := vs.Addr.Addr()
	s := &ipvs.Service{
		Address:       net.IP(a.AsSlice()),
		Protocol:      protoNumbers[vs.Protocol],
		Port:          vs.Addr.Port(),
		SchedName:     vs.Scheduler,
		AddressFamily: family(a),
		// The persistence netmask groups clients: all ones means one client per
		// address. Left at 0, every IPv4 client would share one template.
		Netmask: 0xFFFFFFFF,
	}
	if a.Is6() {
		s.Netmask = 128
	}
	if vs.Persistent {
		s.Flags |= flagPersistent
		s.Timeout = uint32(vs.Timeout / time.Second)
	}
	return s
}

func fromService(s *ipvs.Service) (VirtualServer, error) {
	a, ok := netip.AddrFromSlice(s.Address)
	if !ok {
		return VirtualServer{}, fmt.Errorf("virtual server address %v: not an IP address", s.Address)
	}
	var proto Protocol
	for p, n := range protoNumbers {
		if n == s.Protocol {
			proto = p
		}
	}
	if proto == "" {
		proto = Protocol(fmt.Sprintf("proto-%d", s.Protocol))
	}
	vs := VirtualServer{
		Key:       Key{Protocol: proto, Addr: netip.AddrPortFrom(a.Unmap(), s.Port)},
		Scheduler: s.SchedName,
		Stats:     fromStats(s.Stats),
	}
	if s.Flags&flagPersistent != 0 {
		vs.Persistent = true
		vs.Timeout = time.Duration(s.Timeout) * time.Second
	}
	return vs, nil
}

func fromStats(s ipvs.SvcStats) Stats {
	return Stats{
		Connections: s.Connections,
		PacketsIn:   s.PacketsIn,
		PacketsOut:  s.PacketsOut,
		BytesIn:     s.BytesIn,
		BytesOut:    s.BytesOut,
	}
}
