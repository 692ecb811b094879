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

// check says whether every hook, the jump from a built-in chain to ours, is
// still there (kiptables.HasRule: one chain listing per hook): the frame
// kernelsync's Ledger has checked once per SyncPeriod. Another program that
// flushes the nat or filter table (`iptables -t nat -F`, a firewall reload)
// takes the hooks with it, and deleting our chains needs their hooks gone
// first; either way the next sync is full and writes everything again.
// kube-proxy watches an empty canary chain per table instead
// (utiliptables.Monitor), which notices a table deleted but not one flushed.
func (d *Dataplane) check(ctx context.Context) error {
	for _, h := range hooks {
		ok, err := d.cfg.IPTables.HasRule(ctx, kiptables.Table(h.table), h.chain, h.args...)
		if err != nil {
			return fmt.Errorf("hook %s/%s -> %s: %w", h.table, h.chain, h.args[len(h.args)-1], err)
		}
		if !ok {
			return fmt.Errorf("hook %s/%s -> %s: missing", h.table, h.chain, h.args[len(h.args)-1])
		}
	}
	return nil
}

// ourChains reads the given tables and returns the chains this package owns,
// per table: how a new process finds what an old one left.
func ourChains(ctx context.Context, ipt kiptables.Interface, tables ...string) (map[string]map[string]bool, error) {
	out := map[string]map[string]bool{}
	for _, table := range tables {
		b, err := ipt.Save(ctx, kiptables.Table(table))
		if err != nil {
			return nil, fmt.Errorf("read table %s: %w", table, err)
		}
		out[table] = map[string]bool{}
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
// flushed and deleted in one restore. Running it twice is harmless.
func Cleanup(ctx context.Context, ipt kiptables.Interface) error {
	var errs []error
	for _, h := range hooks {
		if err := ipt.DeleteRule(ctx, kiptables.Table(h.table), h.chain, h.args...); err != nil {
			errs = append(errs, fmt.Errorf("delete hook %s/%s: %w", h.table, h.chain, err))
		}
	}
	chains, err := ourChains(ctx, ipt, tableFilter, tableNAT)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	var b []byte
	for _, table := range []string{tableFilter, tableNAT} {
		b = append(b, kiptables.DeleteChains(kiptables.Table(table), slices.Sorted(maps.Keys(chains[table]))...)...)
	}
	if len(b) > 0 {
		if err := ipt.Restore(ctx, b); err != nil {
			errs = append(errs, fmt.Errorf("delete chains: %w", err))
		}
	}
	return errors.Join(errs...)
}
