package iptables

import (
	"context"
	"strings"
)

// Interface is the netfilter boundary. Real talks to the kernel; Fake keeps the rules in
// memory and can trace packets through them.
type Interface interface {
	// Restore applies rules in iptables-restore format: one or more "*table ... COMMIT"
	// blocks, run by one `iptables-restore --noflush --wait`. A user chain declared with
	// ":NAME - [0:0]" is created, or flushed when it exists; chains not declared are left
	// alone. Besides -A it accepts -I, -D, -F, -X and -P lines, so a sync can delete the
	// chains it no longer needs (declare them, then "-X NAME").
	//
	// Each table block commits on its own, as in iptables-restore: a block that fails
	// changes nothing, but blocks before it stay applied. Put the tables whose rules
	// others depend on first (kube-proxy writes filter, then nat).
	Restore(ctx context.Context, rules []byte) error

	// Save returns the table in iptables-save form (`iptables-save -t table`).
	Save(ctx context.Context, table Table) ([]byte, error)

	// EnsureRule adds the rule to chain unless an equal rule is already there, and says
	// whether it was. Prepend inserts it first in the chain, Append last. This is how our
	// chains are hooked from the built-in ones: PREROUTING, OUTPUT, POSTROUTING, INPUT,
	// FORWARD.
	EnsureRule(ctx context.Context, pos Position, table Table, chain string, args ...string) (existed bool, err error)

	// HasRule reports whether chain holds the rule, as `iptables -C` would, changing
	// nothing: how a sync checks that its hooks are still in place. A missing
	// chain, or a rule that jumps to a missing chain, is an error.
	HasRule(ctx context.Context, table Table, chain string, args ...string) (bool, error)

	// DeleteRule removes the rule from chain. A rule (or chain) that is not there is not
	// an error, so cleanup can run twice.
	DeleteRule(ctx context.Context, table Table, chain string, args ...string) error
}

// CounterReader reads a table with its packet and byte counters, as
// `iptables-save -c` prints them ("[packets:bytes] -A CHAIN ..."). Hybrid mode
// reads the counters of a promoted port's DNAT rules: in the nat table only a
// connection's first packet is evaluated, so they count new connections.
// Real and Fake implement it.
type CounterReader interface {
	SaveCounters(ctx context.Context, table Table) ([]byte, error)
}

// Table is a netfilter table.
type Table string

// The tables svcproxy uses.
const (
	TableNAT    Table = "nat"
	TableFilter Table = "filter"
	TableMangle Table = "mangle"
	TableRaw    Table = "raw"
)

// Position says where EnsureRule puts a new rule.
type Position int

const (
	// Append puts the rule last in the chain (iptables -A).
	Append Position = iota
	// Prepend puts the rule first in the chain (iptables -I CHAIN 1).
	Prepend
)

// Family is the IP family of the rules: iptables or ip6tables.
type Family string

const (
	IPv4 Family = "IPv4"
	IPv6 Family = "IPv6"
)

// builtinChains are the chains each table has from the start, in iptables-save order.
var builtinChains = map[Table][]string{
	TableFilter: {"INPUT", "FORWARD", "OUTPUT"},
	TableNAT:    {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"},
	TableMangle: {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"},
	TableRaw:    {"PREROUTING", "OUTPUT"},
}

// tableOrder is the order in which Dump prints tables: the order a packet meets them.
var tableOrder = []Table{TableRaw, TableMangle, TableNAT, TableFilter}

func isBuiltin(t Table, chain string) bool {
	for _, c := range builtinChains[t] {
		if c == chain {
			return true
		}
	}
	return false
}

// DeleteChains renders the iptables-restore text that deletes chains of one
// table: declaring a chain flushes it, then -X deletes it, so the chains go
// whatever rules they held (they must no longer be jumped to from elsewhere).
// No chains: no text.
func DeleteChains(table Table, chains ...string) []byte {
	if len(chains) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("*" + string(table) + "\n")
	for _, c := range chains {
		b.WriteString(":" + c + " - [0:0]\n")
	}
	for _, c := range chains {
		b.WriteString("-X " + c + "\n")
	}
	b.WriteString("COMMIT\n")
	return []byte(b.String())
}
