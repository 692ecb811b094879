package link

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
)

// Errors the Interface returns (wrapped).
var (
	ErrNotExist = errors.New("does not exist")
	ErrExist    = errors.New("already exists")
)

// Interface is the links and addresses of one network namespace. Implementations are
// safe for concurrent use.
type Interface interface {
	// EnsureDummy creates a dummy link named name unless it exists, and sets it up.
	// An existing link of another kind is an error.
	EnsureDummy(ctx context.Context, name string) error
	// DeleteLink deletes a link; ErrNotExist when there is none.
	DeleteLink(ctx context.Context, name string) error
	// Addresses lists a link's addresses, IPv6 link-local ones included.
	Addresses(ctx context.Context, name string) ([]netip.Prefix, error)
	AddAddress(ctx context.Context, name string, p netip.Prefix) error
	DeleteAddress(ctx context.Context, name string, p netip.Prefix) error
}

// maxNameLen is IFNAMSIZ - 1 (include/uapi/linux/if.h).
const maxNameLen = 15

func validName(name string) error {
	if name == "" || len(name) > maxNameLen {
		return fmt.Errorf("link %q: name: want 1 to %d bytes", name, maxNameLen)
	}
	return nil
}

func validPrefix(name string, p netip.Prefix) error {
	if !p.IsValid() || p.Addr().Is4In6() || p.Addr().Zone() != "" {
		return fmt.Errorf("link %s: address %s: want an IPv4 or IPv6 prefix", name, p)
	}
	return nil
}
