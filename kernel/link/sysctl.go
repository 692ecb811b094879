package link

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Sysctls are the kernel parameters of one network namespace (the net.* keys of
// /proc/sys), named as sysctl(8) does: "net.ipv4.conf.all.arp_ignore".
type Sysctls interface {
	Sysctl(ctx context.Context, key string) (string, error)
	SetSysctl(ctx context.Context, key, value string) error
}

// ProcSys is Sysctls through /proc/sys. The net.* files show the network namespace
// of the thread that opens them: call it from the namespace it should change.
type ProcSys struct{}

var _ Sysctls = ProcSys{}

func sysctlPath(key string) (string, error) {
	if !strings.HasPrefix(key, "net.") || strings.Contains(key, "/") || strings.Contains(key, "..") {
		return "", fmt.Errorf("sysctl %q: key: want net.*, dotted", key)
	}
	return filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/")), nil
}

// Sysctl implements Sysctls.
func (ProcSys) Sysctl(ctx context.Context, key string) (string, error) {
	p, err := sysctlPath(key)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("sysctl %s: %w", key, err)
	}
	return strings.TrimSpace(string(b)), ctx.Err()
}

// SetSysctl implements Sysctls.
func (ProcSys) SetSysctl(ctx context.Context, key, value string) error {
	p, err := sysctlPath(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := os.WriteFile(p, []byte(value), 0o644); err != nil {
		return fmt.Errorf("sysctl %s=%s: %w", key, value, err)
	}
	return nil
}

// FakeSysctls keeps parameters in memory. A key that was never set reads as "0",
// the kernel's default for the flags svcproxy touches.
type FakeSysctls struct {
	mu     sync.Mutex
	values map[string]string
	writes int
}

var _ Sysctls = (*FakeSysctls)(nil)

// Sysctl implements Sysctls.
func (f *FakeSysctls) Sysctl(ctx context.Context, key string) (string, error) {
	if _, err := sysctlPath(key); err != nil {
		return "", err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if v, ok := f.values[key]; ok {
		return v, ctx.Err()
	}
	return "0", ctx.Err()
}

// SetSysctl implements Sysctls.
func (f *FakeSysctls) SetSysctl(ctx context.Context, key, value string) error {
	if _, err := sysctlPath(key); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.values == nil {
		f.values = map[string]string{}
	}
	f.values[key] = value
	f.writes++
	return ctx.Err()
}

// Values returns every parameter that was set, and how many writes there were.
func (f *FakeSysctls) Values() (map[string]string, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.values), f.writes
}
