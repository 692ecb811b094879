package userspace

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/svcproxy/svcproxy/kernel/iptables"
)

// portalState remembers what the last restore did.
type portalState struct {
	// applied are the rules the last restore left in the kernel; nil when
	// they are not known: before the first restore, after a failure, and
	// when Run's periodic resync asks for every chain to be written anew.
	applied  *rules
	err      error  // error of the last restore, nil after a success
	failures uint64 // failed restores since start
}

// applyPortals renders the portals of the served ports and makes the kernel
// hold them. It does nothing when they have not changed since the last
// successful restore. Otherwise, when the kernel holds what that restore
// left, it writes only the rules that changed (changes): one portal's rules
// instead of every portal's, which is what a Service created or deleted
// needs. The first restore, the one after a failure, the periodic one of Run
// (resync, which forgets what was applied) and one that would delete many
// rules write every chain of ours anew; the first three also make sure our
// chains are hooked from the built-in chains. A restore of our chains
// (--noflush) does not touch the hooks, and checking the seven of them is
// seven iptables processes, each of which reads the whole table on the
// nf_tables backend (bench/kubeproxy: hybrid's syncs at 1,000 Services spent
// most of their time there).
func (p *Proxier) applyPortals(ctx context.Context) error {
	ipt := p.cfg.IPTables
	if ipt == nil {
		return nil
	}
	want := renderRules(p.cfg.Family, portalsOf(p.ports, p.cfg))
	last := p.portals.applied
	if last != nil && last.equal(want) {
		return nil
	}
	err := p.cfg.NetNS(func() error {
		if last == nil {
			return apply(ctx, ipt, want.restore(), true)
		}
		text, ok := changes(last, want)
		if !ok {
			return apply(ctx, ipt, want.restore(), false)
		}
		err := ipt.Restore(ctx, text)
		if err == nil {
			return nil
		}
		// Another program changed our chains (a "-D" found no rule to
		// delete): write them all again, and the hooks.
		p.cfg.Logger.Warn("portals: restoring the rules that changed failed; writing every portal", "err", err)
		return apply(ctx, ipt, want.restore(), true)
	})
	if err != nil {
		p.portals.failures++
		p.portals.applied, p.portals.err = nil, err
		return err
	}
	p.portals.applied, p.portals.err = want, nil
	return nil
}

// ApplyPortals renders the portals again and applies them if they changed,
// returning once the kernel has them: for a caller whose Config.Carries changed
// its answer. A failure is retried by Run, as after Sync.
func (p *Proxier) ApplyPortals() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	err := p.applyPortals(p.ctx)
	if err != nil {
		p.retryLater()
	} else if err := p.clearRejected(p.ctx); err != nil {
		p.cfg.Logger.Warn("conntrack cleanup failed", "err", err)
	}
	return err
}

// apply restores rules, then, with hook, ensures the hooks: the chains must
// exist before a rule can jump to them.
func apply(ctx context.Context, ipt iptables.Interface, rules []byte, hook bool) error {
	if err := ipt.Restore(ctx, rules); err != nil {
		return fmt.Errorf("portals: %w", err)
	}
	if !hook {
		return nil
	}
	for _, h := range hooks {
		if _, err := ipt.EnsureRule(ctx, iptables.Append, h.table, h.chain, h.args()...); err != nil {
			return fmt.Errorf("portals: hook %s/%s -> %s: %w", h.table, h.chain, h.jump, err)
		}
	}
	return nil
}

// Cleanup removes every hook and chain the userspace mode makes, whether or not a
// Proxier is running: `svcproxy --cleanup` calls it on a node where a previous run
// may have left them. Missing hooks and chains are not an error, so it can run
// twice. It acts on the namespace of the calling thread (see package iptables).
func Cleanup(ctx context.Context, ipt iptables.Interface) error {
	var errs []error
	saved := map[iptables.Table]string{}
	for _, h := range hooks {
		// Only hooks that are there: `iptables -D` of a rule jumping to a chain
		// that does not exist fails differently in the legacy and nf_tables
		// variants, and a clean node has neither.
		if _, ok := saved[h.table]; !ok {
			b, err := ipt.Save(ctx, h.table)
			if err != nil {
				errs = append(errs, err)
			}
			saved[h.table] = string(b)
		}
		if !strings.Contains(saved[h.table], "-j "+h.jump) {
			continue
		}
		if err := ipt.DeleteRule(ctx, h.table, h.chain, h.args()...); err != nil {
			errs = append(errs, fmt.Errorf("hook %s/%s -> %s: %w", h.table, h.chain, h.jump, err))
		}
	}
	if err := ipt.Restore(ctx, renderCleanup()); err != nil {
		errs = append(errs, fmt.Errorf("chains: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("userspace cleanup: %w", err)
	}
	return nil
}
