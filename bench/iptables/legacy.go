package iptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
)

// Legacy is kiptables.Interface over the iptables-legacy binaries (x_tables), for
// the benchmarks only: the sync figures are taken with both backends, because
// iptables-nft 1.8.9's --noflush restore grows faster than linearly with the size
// of its input (see docs/benchmarks.md ("The iptables dataplane")). Never mix the two backends in one
// namespace: both would filter every packet.
type Legacy struct{}

var _ kiptables.Interface = Legacy{}

func run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// Restore implements kiptables.Interface.
func (Legacy) Restore(ctx context.Context, rules []byte) error {
	_, err := run(ctx, rules, "iptables-legacy-restore", "--noflush", "--wait")
	return err
}

// Save implements kiptables.Interface.
func (Legacy) Save(ctx context.Context, t kiptables.Table) ([]byte, error) {
	return run(ctx, nil, "iptables-legacy-save", "-t", string(t))
}

// EnsureRule implements kiptables.Interface.
func (Legacy) EnsureRule(ctx context.Context, pos kiptables.Position, t kiptables.Table, chain string, args ...string) (bool, error) {
	if _, err := run(ctx, nil, "iptables-legacy", append([]string{"-w", "-t", string(t), "-C", chain}, args...)...); err == nil {
		return true, nil
	}
	op := []string{"-A", chain}
	if pos == kiptables.Prepend {
		op = []string{"-I", chain, "1"}
	}
	_, err := run(ctx, nil, "iptables-legacy", append(append([]string{"-w", "-t", string(t)}, op...), args...)...)
	return false, err
}

// HasRule implements kiptables.Interface: exit status 1 is "no such rule".
func (Legacy) HasRule(ctx context.Context, t kiptables.Table, chain string, args ...string) (bool, error) {
	_, err := run(ctx, nil, "iptables-legacy", append([]string{"-w", "-t", string(t), "-C", chain}, args...)...)
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 1 {
		return false, nil
	}
	return err == nil, err
}

// DeleteRule implements kiptables.Interface.
func (Legacy) DeleteRule(ctx context.Context, t kiptables.Table, chain string, args ...string) error {
	_, err := run(ctx, nil, "iptables-legacy", append([]string{"-w", "-t", string(t), "-D", chain}, args...)...)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return nil // not there: cleanup may run twice
	}
	return err
}
