package nftables

import (
	"context"
	"fmt"
	"iter"
	"net/netip"
	"slices"
	"sync"
	"time"

	"sigs.k8s.io/knftables"
)

var _ Interface = (*Fake)(nil)

// Fake is an in-memory nftables table: knftables.Fake, which applies transactions with
// the kernel's rules (a transaction that fails changes nothing; objects must exist
// before they are referenced, and cannot be deleted while referenced) and prints the
// table in `nft list` form with Dump, plus what a tracer needs: the node's local
// addresses, a clock, and the contents of dynamic sets (which the kernel fills as
// packets pass, so knftables does not keep them). It is safe for concurrent use.
type Fake struct {
	*knftables.Fake

	// Now is the clock of dynamic set timeouts (ClientIP affinity); nil means
	// time.Now. Set it before the first Trace.
	Now func() time.Time

	family knftables.Family // ip or ip6: the packets the table sees

	mu      sync.Mutex
	local   []netip.Addr
	dynamic map[string]map[netip.Addr]time.Time // set -> address -> last update
	runs    int
}

// NewFake returns a Fake for the IPv4 table name, with no table yet.
func NewFake(table string) *Fake { return NewFakeFamily(knftables.IPv4Family, table) }

// NewFakeFamily returns a Fake for the table name of family (ip or ip6), with no
// table yet.
func NewFakeFamily(family knftables.Family, table string) *Fake {
	return &Fake{Fake: knftables.NewFake(family, table), family: family, dynamic: map[string]map[netip.Addr]time.Time{}}
}

// Run implements Interface. It counts the transactions, for tests of what a sync
// sends (LastTransaction is the last one).
func (f *Fake) Run(ctx context.Context, tx *knftables.Transaction) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	f.runs++
	f.mu.Unlock()
	return f.Fake.Run(ctx, tx)
}

// RunParts implements Interface: every part in one transaction, run as Run
// runs it (so LastTransaction is all of it).
func (f *Fake) RunParts(ctx context.Context, parts iter.Seq[func(*knftables.Transaction)]) (int, error) {
	tx := f.NewTransaction()
	for fill := range parts {
		fill(tx)
	}
	if tx.NumOperations() == 0 {
		return 0, nil
	}
	return tx.NumOperations(), f.Run(ctx, tx)
}

// CountRules implements Interface.
func (f *Fake) CountRules(ctx context.Context, chain string) (int, error) {
	rules, err := f.Fake.ListRules(ctx, chain)
	if knftables.IsNotFound(err) {
		// No such table (an error), or no such chain (no rules).
		_, err = f.Fake.ListRules(ctx, "")
		return 0, err
	}
	return len(rules), err
}

// Runs returns how many transactions Run was given (failed ones included).
func (f *Fake) Runs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runs
}

// SetLocalAddrs sets the node's own addresses (loopback is always local): they decide
// `fib daddr type local` and whether a packet is delivered (input) or forwarded.
func (f *Fake) SetLocalAddrs(addrs ...netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.local = append([]netip.Addr(nil), addrs...)
}

func (f *Fake) isLocal(a netip.Addr) bool { return a.IsLoopback() || slices.Contains(f.local, a) }

func (f *Fake) now() time.Time {
	if f.Now != nil {
		return f.Now()
	}
	return time.Now()
}

// checkFamily refuses a packet of the other IP family: an `ip` table never sees
// an IPv6 packet, nor an `ip6` table an IPv4 one.
func (f *Fake) checkFamily(p Packet) error {
	want := knftables.IPv4Family
	if p.Dst.Addr().Unmap().Is6() {
		want = knftables.IPv6Family
	}
	if f.family != want {
		return fmt.Errorf("packet to %s: a table of family %s never sees it", p.Dst, f.family)
	}
	return nil
}
