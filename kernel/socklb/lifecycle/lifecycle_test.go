package lifecycle

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A --socklb-cgroup that is not a cgroup v2 directory is refused before
// anything is loaded, with an error naming the flag and the directory.
func TestOpenCgroup(t *testing.T) {
	dir := t.TempDir() // tmpfs or a disk: not cgroup2
	if _, err := Open(Config{Cgroup: dir}); err == nil || !strings.Contains(err.Error(), "--socklb-cgroup "+dir+": not a cgroup v2 directory") {
		t.Errorf("Open on %s: %v, want an error naming the flag and saying it is not cgroup v2", dir, err)
	}
	if _, err := Open(Config{Cgroup: dir + "/missing"}); err == nil || !strings.Contains(err.Error(), "--socklb-cgroup "+dir+"/missing") {
		t.Errorf("Open on a missing directory: %v, want an error naming it", err)
	}
}

// Remove and RemoveLeftover do nothing where nothing was pinned.
func TestRemoveNothing(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "svcproxy")
	for _, p := range []string{"", missing} {
		if err := Remove(p); err != nil {
			t.Errorf("Remove(%q): %v, want nil: nothing pinned", p, err)
		}
	}
	var logs strings.Builder
	RemoveLeftover(Config{PinPath: missing, PinPathGiven: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, "iptables")
	if logs.Len() > 0 {
		t.Errorf("RemoveLeftover of nothing logged %q", logs.String())
	}
}

// A --socklb-pin-path given off a bpffs is refused, naming the flag; the
// default where no bpffs is mounted is logged and pins nothing.
func TestPinPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "svcproxy")
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	cfg := Config{PinPath: dir, PinPathGiven: true, Logger: log}
	if _, err := pinPath(cfg); err == nil || !strings.Contains(err.Error(), "--socklb-pin-path "+dir) || !strings.Contains(err.Error(), "not on a bpffs") {
		t.Errorf("--socklb-pin-path %s: %v, want an error naming the flag and saying it is not on a bpffs", dir, err)
	}
	cfg.PinPathGiven = false // as if it were the default
	if got, err := pinPath(cfg); err != nil || got != "" || !strings.Contains(logs.String(), "socket LB not pinned") {
		t.Errorf("default pin path off a bpffs: %q, %v, log %q; want nothing pinned and a warning", got, err, logs.String())
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s was made (%v): nothing should be, off a bpffs", dir, err)
	}
	cfg.PinPath = ""
	if got, err := pinPath(cfg); err != nil || got != "" {
		t.Errorf(`--socklb-pin-path "": %q, %v; want nothing pinned`, got, err)
	}
}
