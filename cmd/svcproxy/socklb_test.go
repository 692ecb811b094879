package main

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/kernel/socklb/lifecycle"
)

// --mode socklb parses, and a --socklb-cgroup that is not a cgroup v2
// directory is refused before anything is loaded, with an error naming the
// flag and the directory.
func TestSocketLBFlags(t *testing.T) {
	dir := t.TempDir() // tmpfs or a disk: not cgroup2
	cfg, err := parseFlags([]string{"--mode", "socklb", "--socklb-cgroup", dir, "--services", "x.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mode != modeSocketLB || cfg.SocketLBCgroup != dir {
		t.Fatalf("--mode socklb --socklb-cgroup %s: mode %q, cgroup %q", dir, cfg.Mode, cfg.SocketLBCgroup)
	}
	_, err = lifecycle.Open(cfg.modes(slog.New(slog.DiscardHandler)).SocketLB)
	if err == nil || !strings.Contains(err.Error(), "--socklb-cgroup "+dir+": not a cgroup v2 directory") {
		t.Errorf("lifecycle.Open on %s: %v, want an error naming the flag and saying it is not cgroup v2", dir, err)
	}
	cfg.SocketLBCgroup = dir + "/missing"
	if _, err := lifecycle.Open(cfg.modes(slog.New(slog.DiscardHandler)).SocketLB); err == nil || !strings.Contains(err.Error(), "--socklb-cgroup "+dir+"/missing") {
		t.Errorf("lifecycle.Open on a missing directory: %v, want an error naming it", err)
	}
}
