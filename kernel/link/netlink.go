package link

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Netlink is the Interface on the running kernel.
type Netlink struct {
	mu sync.Mutex // one request at a time on the handle's socket
	h  *netlink.Handle
}

var _ Interface = (*Netlink)(nil)

// New opens rtnetlink in the network namespace of the calling OS thread. Only
// NETLINK_ROUTE: netlink.NewHandle() without arguments also opens an XFRM socket,
// which fails where the xfrm module is missing. Close releases it.
func New() (*Netlink, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("link: open rtnetlink socket: %w", err)
	}
	return &Netlink{h: h}, nil
}

// Close releases the netlink socket.
func (n *Netlink) Close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.h.Close()
}

func (n *Netlink) lock(ctx context.Context, what string) (unlock func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	n.mu.Lock()
	return n.mu.Unlock, nil
}

// find returns the link named name, or ErrNotExist.
func (n *Netlink) find(name string) (netlink.Link, error) {
	l, err := n.h.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) || errors.Is(err, unix.ENODEV) {
		return nil, fmt.Errorf("link %s: %w", name, ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("link %s: %w", name, err)
	}
	return l, nil
}

// EnsureDummy implements Interface.
func (n *Netlink) EnsureDummy(ctx context.Context, name string) error {
	if err := validName(name); err != nil {
		return err
	}
	unlock, err := n.lock(ctx, "link "+name)
	if err != nil {
		return err
	}
	defer unlock()
	l, err := n.find(name)
	if errors.Is(err, ErrNotExist) {
		d := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: name}}
		if err := n.h.LinkAdd(d); err != nil {
			return fmt.Errorf("link %s: add dummy: %w", name, err)
		}
		l, err = n.find(name)
	}
	if err != nil {
		return err
	}
	if l.Type() != "dummy" {
		return fmt.Errorf("link %s: type %q: want dummy", name, l.Type())
	}
	if l.Attrs().Flags&net.FlagUp == 0 {
		if err := n.h.LinkSetUp(l); err != nil {
			return fmt.Errorf("link %s: set up: %w", name, err)
		}
	}
	return nil
}

// DeleteLink implements Interface.
func (n *Netlink) DeleteLink(ctx context.Context, name string) error {
	if err := validName(name); err != nil {
		return err
	}
	unlock, err := n.lock(ctx, "link "+name)
	if err != nil {
		return err
	}
	defer unlock()
	l, err := n.find(name)
	if err != nil {
		return err
	}
	if err := n.h.LinkDel(l); err != nil {
		return fmt.Errorf("link %s: delete: %w", name, err)
	}
	return nil
}

// Addresses implements Interface.
func (n *Netlink) Addresses(ctx context.Context, name string) ([]netip.Prefix, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	unlock, err := n.lock(ctx, "link "+name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	l, err := n.find(name)
	if err != nil {
		return nil, err
	}
	addrs, err := n.h.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("link %s: list addresses: %w", name, err)
	}
	out := make([]netip.Prefix, 0, len(addrs))
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		bits, _ := a.Mask.Size()
		out = append(out, netip.PrefixFrom(ip.Unmap(), bits))
	}
	return out, nil
}

// AddAddress implements Interface.
func (n *Netlink) AddAddress(ctx context.Context, name string, p netip.Prefix) error {
	return n.addr(ctx, "add", name, p, (*netlink.Handle).AddrAdd)
}

// DeleteAddress implements Interface.
func (n *Netlink) DeleteAddress(ctx context.Context, name string, p netip.Prefix) error {
	return n.addr(ctx, "delete", name, p, (*netlink.Handle).AddrDel)
}

func (n *Netlink) addr(ctx context.Context, verb, name string, p netip.Prefix,
	fn func(*netlink.Handle, netlink.Link, *netlink.Addr) error) error {
	if err := validName(name); err != nil {
		return err
	}
	if err := validPrefix(name, p); err != nil {
		return err
	}
	unlock, err := n.lock(ctx, "link "+name)
	if err != nil {
		return err
	}
	defer unlock()
	l, err := n.find(name)
	if err != nil {
		return err
	}
	a := &netlink.Addr{IPNet: &net.IPNet{
		IP:   net.IP(p.Addr().AsSlice()),
		Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen()),
	}}
	if p.Addr().Is6() {
		// A service IP is not on a shared link: duplicate address detection would only
		// keep it "tentative" (unusable) for a second or more.
		a.Flags = unix.IFA_F_NODAD
	}
	if err := fn(n.h, l, a); err != nil {
		switch {
		case errors.Is(err, unix.EEXIST):
			err = fmt.Errorf("%w (%w)", ErrExist, err)
		case errors.Is(err, unix.EADDRNOTAVAIL):
			err = fmt.Errorf("%w (%w)", ErrNotExist, err)
		}
		return fmt.Errorf("link %s: %s address %s: %w", name, verb, p, err)
	}
	return nil
}
