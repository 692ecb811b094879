package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	_, err = newSocketLB(cfg, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "--socklb-cgroup "+dir+": not a cgroup v2 directory") {
		t.Errorf("newSocketLB on %s: %v, want an error naming the flag and saying it is not cgroup v2", dir, err)
	}
	cfg.SocketLBCgroup = dir + "/missing"
	if _, err := newSocketLB(cfg, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "--socklb-cgroup "+dir+"/missing") {
		t.Errorf("newSocketLB on a missing directory: %v, want an error naming it", err)
	}
}

// A --socklb-pin-path given off a bpffs is refused, naming the flag; the
// default where no bpffs is mounted is logged and pins nothing.
func TestSocketLBPinPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "svcproxy")
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	cfg := &Config{SocketLBPinPath: dir, SocketLBPinPathSet: true}
	if _, err := socketLBPinPath(cfg, log); err == nil || !strings.Contains(err.Error(), "--socklb-pin-path "+dir) || !strings.Contains(err.Error(), "not on a bpffs") {
		t.Errorf("--socklb-pin-path %s: %v, want an error naming the flag and saying it is not on a bpffs", dir, err)
	}
	cfg.SocketLBPinPathSet = false // as if it were the default
	if got, err := socketLBPinPath(cfg, log); err != nil || got != "" || !strings.Contains(logs.String(), "socket LB not pinned") {
		t.Errorf("default pin path off a bpffs: %q, %v, log %q; want nothing pinned and a warning", got, err, logs.String())
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s was made (%v): nothing should be, off a bpffs", dir, err)
	}
	cfg.SocketLBPinPath = ""
	if got, err := socketLBPinPath(cfg, log); err != nil || got != "" {
		t.Errorf(`--socklb-pin-path "": %q, %v; want nothing pinned`, got, err)
	}
}
