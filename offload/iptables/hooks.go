package iptables

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
)

// missingHooks are the hooks, the jumps from the built-in chains to ours,
// that the kernel does not hold: a full sync inserts them in its restore
// (plan.hooks), so they come with the chains they jump to, in one commit
// per table. kube-proxy's syncProxyRules ensures its jumps with
// `iptables -C`/`-I` before its restore instead, as svcproxy did after its
// restore until it measured the cost: on the legacy backend every such
// command reads and writes back the whole table, which at a cold start of
// 10,000 Services (30,000 endpoints) held /healthz 200 five seconds behind
// the restore. A hook to a chain of ours the kernel does not hold (existing,
// per table, as ourChains read it) is missing without a look: at a cold
// start, all of them.
func missingHooks(ctx context.Context, ipt kiptables.Interface, existing map[string]map[string]bool) ([]hook, error) {
	var out []hook
	for _, h := range hooks {
		if !existing[h.table][h.target()] {
			out = append(out, h)
			continue
		}
		ok, err := ipt.HasRule(ctx, kiptables.Table(h.table), h.chain, h.args...)
		if err != nil {
			return nil, fmt.Errorf("hook %s/%s -> %s: %w", h.table, h.chain, h.args[len(h.args)-1], err)
		}
		if !ok {
			out = append(out, h)
		}
	}
	return out, nil
}

// target is the chain of ours the hook jumps to.
func (h hook) target() string { return h.args[len(h.args)-1] }

// insert is the hook as a line of iptables-restore input: prepended (-I),
// so the jump sits before any other program's rules, as EnsureRule's
// Prepend put it; the comment quoted.
func (h hook) insert() string {
	var b strings.Builder
	b.WriteString("-I " + h.chain)
	for i, a := range h.args {
		if i > 0 && h.args[i-1] == "--comment" {
			a = `"` + a + `"`
		}
		b.WriteString(" " + a)
	}
	b.WriteString("\n")
	return b.String()
}

// check says whether the canary chain is still in mangle: the frame
// kernelsync's Ledger has checked once per SyncPeriod, as kube-proxy's
// iptables proxier has utiliptables.Monitor poll KUBE-PROXY-CANARY in mangle
// every --iptables-sync-period (pkg/util/iptables, runner.Monitor). A full
// sync declares the canary in filter, nat and mangle; another program that
// resets the tables (a firewall reload: iptables-restore without --noflush,
// `iptables -t mangle -X`) deletes it, and the sync that finds it gone is full
// and writes everything again, the hooks included. Reading mangle, a table
// svcproxy writes nothing else into, costs little on either backend; the
// hooks it replaced were three listings of nat, and on the legacy backend
// each listing copies the whole table from the kernel (at 30,000 endpoints
// 0.15 CPU s, 0.44 s at load 21).
//
// Like kube-proxy's, the canary does not notice what leaves mangle alone: a
// nat table flushed (`iptables -t nat -F` empties every chain and deletes
// none) or reset on its own. Those wait for the next full sync: a failure,
// a restart, or FullSyncPeriod (never, in a large cluster).
//
// When the mangle canary is gone, check waits, as Monitor does, up to
// canaryFlushTimeout for the canaries of nat and filter to go too, so that a
// reload still under way does not take the rules of the repair with it.
func (d *Dataplane) check(ctx context.Context) error {
	ipt := d.cfg.IPTables
	ok, err := hasCanary(ctx, ipt, tableMangle)
	if err != nil {
		return fmt.Errorf("canary %s/%s: %w", tableMangle, chainCanary, err)
	}
	if ok {
		return nil
	}
	deadline := time.Now().Add(canaryFlushTimeout)
	for time.Now().Before(deadline) {
		left := false
		for _, table := range []string{tableNAT, tableFilter} {
			if ok, err := hasCanary(ctx, ipt, table); ok || err != nil {
				left = true
			}
		}
		if !left {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(canaryFlushPoll):
		}
	}
	return fmt.Errorf("canary %s/%s: missing (the tables were reset)", tableMangle, chainCanary)
}

// canaryFlushTimeout and canaryFlushPoll are kube-proxy's
// iptablesFlushTimeout and iptablesFlushPollTime (pkg/util/iptables): how
// long check waits for every canary to be gone, and how often it looks.
var (
	canaryFlushTimeout = 5 * time.Second
	canaryFlushPoll    = 100 * time.Millisecond
)

// hasCanary says whether table holds chainCanary: one iptables-save of the
// table.
func hasCanary(ctx context.Context, ipt kiptables.Interface, table string) (bool, error) {
	b, err := ipt.Save(ctx, kiptables.Table(table))
	if errors.Is(err, kiptables.ErrNoTable) {
		return false, nil // no table, no canary: a full sync makes both
	}
	if err != nil {
		return false, err
	}
	return slices.Contains(savedChains(b), chainCanary), nil
}

// ourChains reads the given tables and returns the chains this package owns,
// per table: how a new process finds what an old one left.
func ourChains(ctx context.Context, ipt kiptables.Interface, tables ...string) (map[string]map[string]bool, error) {
	out := map[string]map[string]bool{}
	for _, table := range tables {
		b, err := ipt.Save(ctx, kiptables.Table(table))
		out[table] = map[string]bool{}
		if errors.Is(err, kiptables.ErrNoTable) {
			continue // a table never loaded holds nothing of ours
		}
		if err != nil {
			return nil, fmt.Errorf("read table %s: %w", table, err)
		}
		for _, c := range savedChains(b) {
			if isOurChain(table, c) {
				out[table][c] = true
			}
		}
	}
	return out, nil
}

// savedChains returns the chain names declared in iptables-save output.
func savedChains(save []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(save))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, ":") {
			if name, _, ok := strings.Cut(line[1:], " "); ok {
				out = append(out, name)
			}
		}
	}
	return out
}

// Cleanup removes every hook and chain this package made (svcproxy --cleanup):
// the hooks first, so that the chains are no longer referenced, then the chains,
// the canaries included, flushed and deleted in one restore. Running it twice is harmless.
func Cleanup(ctx context.Context, ipt kiptables.Interface) error {
	var errs []error
	for _, h := range hooks {
		if err := ipt.DeleteRule(ctx, kiptables.Table(h.table), h.chain, h.args...); err != nil {
			errs = append(errs, fmt.Errorf("delete hook %s/%s: %w", h.table, h.chain, err))
		}
	}
	chains, err := ourChains(ctx, ipt, canaryTables...)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	var b []byte
	for _, table := range canaryTables {
		b = append(b, kiptables.DeleteChains(kiptables.Table(table), slices.Sorted(maps.Keys(chains[table]))...)...)
	}
	if len(b) > 0 {
		if err := ipt.Restore(ctx, b); err != nil {
			errs = append(errs, fmt.Errorf("delete chains: %w", err))
		}
	}
	return errors.Join(errs...)
}
