package link

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Fake keeps links and their addresses in memory. AddLink adds links of other kinds
// (an eth0, a foreign interface) for tests.
type Fake struct {
	mu    sync.Mutex
	links map[string]*fakeLink
}

type fakeLink struct {
	kind  string
	up    bool
	addrs []netip.Prefix
}

var _ Interface = (*Fake)(nil)

// NewFake returns a Fake with no links.
func NewFake() *Fake { return &Fake{links: map[string]*fakeLink{}} }

// AddLink adds a link of any kind, up, with addresses.
func (f *Fake) AddLink(name, kind string, addrs ...netip.Prefix) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.links[name] = &fakeLink{kind: kind, up: true, addrs: slices.Clone(addrs)}
}

// Dump lists links and addresses, sorted, one link a line:
// "svcp-ipvs0 dummy up 198.18.0.10/32 198.18.0.11/32".
func (f *Fake) Dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	names := make([]string, 0, len(f.links))
	for n := range f.links {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		l := f.links[n]
		state := "down"
		if l.up {
			state = "up"
		}
		fmt.Fprintf(&b, "%s %s %s", n, l.kind, state)
		addrs := slices.Clone(l.addrs)
		slices.SortFunc(addrs, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
		for _, a := range addrs {
			b.WriteString(" " + a.String())
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// EnsureDummy implements Interface.
func (f *Fake) EnsureDummy(ctx context.Context, name string) error {
	if err := validName(name); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.links[name]
	if !ok {
		f.links[name] = &fakeLink{kind: "dummy", up: true}
		return ctx.Err()
	}
	if l.kind != "dummy" {
		return fmt.Errorf("link %s: type %q: want dummy", name, l.kind)
	}
	l.up = true
	return ctx.Err()
}

// DeleteLink implements Interface.
func (f *Fake) DeleteLink(ctx context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.links[name]; !ok {
		return fmt.Errorf("link %s: %w", name, ErrNotExist)
	}
	delete(f.links, name)
	return ctx.Err()
}

// Addresses implements Interface.
func (f *Fake) Addresses(ctx context.Context, name string) ([]netip.Prefix, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.links[name]
	if !ok {
		return nil, fmt.Errorf("link %s: %w", name, ErrNotExist)
	}
	return slices.Clone(l.addrs), ctx.Err()
}

// AddAddress implements Interface.
func (f *Fake) AddAddress(ctx context.Context, name string, p netip.Prefix) error {
	if err := validPrefix(name, p); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.links[name]
	if !ok {
		return fmt.Errorf("link %s: %w", name, ErrNotExist)
	}
	if slices.Contains(l.addrs, p) {
		return fmt.Errorf("link %s: add address %s: %w", name, p, ErrExist)
	}
	l.addrs = append(l.addrs, p)
	return ctx.Err()
}

// DeleteAddress implements Interface.
func (f *Fake) DeleteAddress(ctx context.Context, name string, p netip.Prefix) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.links[name]
	if !ok {
		return fmt.Errorf("link %s: %w", name, ErrNotExist)
	}
	i := slices.Index(l.addrs, p)
	if i < 0 {
		return fmt.Errorf("link %s: delete address %s: %w", name, p, ErrNotExist)
	}
	l.addrs = slices.Delete(l.addrs, i, i+1)
	return ctx.Err()
}
