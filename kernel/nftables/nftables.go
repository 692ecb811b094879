package nftables

import (
	"context"
	"errors"
	"fmt"
	"os/exec"

	"sigs.k8s.io/knftables"
)

// Interface is the nftables boundary, for one table. Real talks to the kernel; Fake
// keeps the table in memory and traces packets through it. Both are knftables
// Interfaces; svcproxy uses only these calls.
type Interface interface {
	// NewTransaction returns an empty transaction for the table.
	NewTransaction() *knftables.Transaction

	// Run applies tx atomically: all of it, or (with an error) nothing.
	Run(ctx context.Context, tx *knftables.Transaction) error

	// ListAll returns the names of the table's objects by type ("chain", "set",
	// "map"); an error for which knftables.IsNotFound is true when there is no table.
	// This is how a new process finds what an old one left.
	ListAll(ctx context.Context) (map[string][]string, error)

	// ListCounters returns the table's named counters with their packet and byte
	// counts.
	ListCounters(ctx context.Context) ([]*knftables.Counter, error)
}

var _ Interface = knftables.Interface(nil)

// New returns a Real Interface for the IPv4 table name. It fails, saying why, when
// the nft binary is missing or the kernel has no nf_tables.
func New(table string) (Interface, error) {
	// Not knftables.UseNetlink: its ListAll (v0.0.22, experimental) reports a
	// missing table as an error knftables.IsNotFound does not recognise.
	nft, err := knftables.New(knftables.IPv4Family, table)
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	return nft, nil
}

// Available says why nftables cannot be used here, or nil: the nft binary must be on
// PATH and able to talk to the kernel.
func Available() error {
	if _, err := exec.LookPath("nft"); err != nil {
		return errors.New("nftables: the nft binary is not installed (Debian package nftables)")
	}
	_, err := knftables.New(knftables.IPv4Family, "svcproxy-probe")
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	return nil
}

// IsNotFound reports whether err says that the table (or another object) does not
// exist.
func IsNotFound(err error) bool { return knftables.IsNotFound(err) }
