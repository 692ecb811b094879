package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/dataplane"
	knft "github.com/svcproxy/svcproxy/kernel/nftables"
	ksocklb "github.com/svcproxy/svcproxy/kernel/socklb"
	"github.com/svcproxy/svcproxy/offload/socklb"
	"github.com/svcproxy/svcproxy/service"
)

// defaultSocketLBCgroup is where --mode socklb attaches without
// --socklb-cgroup: the node's cgroup2 root, so every process of the node (and
// every pod, each in a cgroup below it) is seen, as Cilium attaches at
// /run/cilium/cgroupv2. It must be a cgroup2 mount; on a machine that mounts
// cgroup v1 there (a tmpfs of v1 controllers), the flag must name one.
const defaultSocketLBCgroup = "/sys/fs/cgroup"

// defaultSocketLBPinPath is where the socket LB pins its maps and links
// without --socklb-pin-path: a directory of its own on the node's bpffs, as
// Cilium pins under /sys/fs/bpf.
const defaultSocketLBPinPath = "/sys/fs/bpf/svcproxy"

// usesSocketLB says whether mode (with hybrid's offloadMode) runs the socket
// LB, whose programs and maps are one per node, shared by both families.
func usesSocketLB(mode, offloadMode string) bool {
	return mode == dataplane.ModeSocketLB || (mode == dataplane.ModeHybrid && offloadMode == dataplane.ModeSocketLB)
}

// newSocketLB loads the socket LB's programs and attaches them to
// --socklb-cgroup (kernel/socklb.New). It checks first what would otherwise
// fail later with a less clear errno: that the directory is a cgroup v2 one,
// and that nft is there for the path beside.
func newSocketLB(cfg *Config, log *slog.Logger) (*ksocklb.Kernel, error) {
	path := cfg.SocketLBCgroup
	if path == "" {
		path = defaultSocketLBCgroup
	}
	if err := isCgroup2(path); err != nil {
		if cfg.SocketLBCgroup == "" {
			return nil, fmt.Errorf("--socklb-cgroup not given and the default %s: %w; name a cgroup2 directory (where cgroup v1 is mounted, the hybrid hierarchy's /sys/fs/cgroup/unified, or a mount -t cgroup2 of your own)", path, err)
		}
		return nil, fmt.Errorf("--socklb-cgroup %s: %w", path, err)
	}
	if err := knft.Available(); err != nil {
		return nil, fmt.Errorf("--mode socklb: the nftables path beside the socket LB needs nft: %w", err)
	}
	pin, err := socketLBPinPath(cfg, log)
	if err != nil {
		return nil, err
	}
	k, err := ksocklb.New(ksocklb.Config{CgroupPath: path, PinPath: pin})
	if err != nil {
		return nil, fmt.Errorf("--socklb-cgroup %s, --socklb-pin-path %q: %w", path, pin, err)
	}
	return k, nil
}

// socketLBPinPath is the directory the socket LB pins in ("" for none),
// made when missing. Its parent must be on a bpffs: a --socklb-pin-path
// given elsewhere is an error; the default on a node without /sys/fs/bpf
// mounted is logged, and nothing is pinned (a restart then leaves new
// connections to the nftables path until the next svcproxy attaches).
func socketLBPinPath(cfg *Config, log *slog.Logger) (string, error) {
	path := cfg.SocketLBPinPath
	if path == "" {
		return "", nil
	}
	if err := isBPFFS(filepath.Dir(path)); err != nil {
		if !cfg.SocketLBPinPathSet {
			log.Warn("socket LB not pinned: a restart interrupts its translation (mount -t bpf bpf /sys/fs/bpf, or give --socklb-pin-path)",
				"path", path, "reason", err)
			return "", nil
		}
		return "", fmt.Errorf("--socklb-pin-path %s: %s: %w", path, filepath.Dir(path), err)
	}
	if err := os.Mkdir(path, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("--socklb-pin-path %s: %w", path, err)
	}
	return path, nil
}

// isBPFFS says why dir is not a directory of a bpffs, or nil.
func isBPFFS(dir string) error {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return err
	}
	if fs.Type != unix.BPF_FS_MAGIC {
		return errors.New("not on a bpffs")
	}
	return nil
}

// cleanupSocketLB detaches and unpins what a socket LB pinned in
// --socklb-pin-path (kernel/socklb.Cleanup), and removes the directory
// svcproxy made there. Without the directory there is nothing to do: an
// unpinned socket LB went with its process.
func cleanupSocketLB(cfg *Config) error {
	path := cfg.SocketLBPinPath
	if path == "" {
		return nil
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := ksocklb.Cleanup(ksocklb.Config{PinPath: path}); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

// isCgroup2 says why path is not a directory of a cgroup v2 hierarchy, or nil.
func isCgroup2(path string) error {
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		return err
	}
	if fs.Type != unix.CGROUP2_SUPER_MAGIC {
		return errors.New("not a cgroup v2 directory")
	}
	return nil
}

// socketLBPath builds the socket LB of family fam: its Proxier over the
// node's maps (lb) and, beside it, nftables mode for every packet the hooks
// do not see or leave alone. Both are restricted to the ports carried accepts
// when it is not nil (hybrid mode).
func socketLBPath(cfg *Config, fam service.Family, lb *ksocklb.Kernel, carried func(service.PortName) bool, log *slog.Logger) (dataplane.KernelPath, error) {
	if lb == nil {
		return nil, errors.New("socklb: no socket LB loaded")
	}
	beside, err := nftablesPath(cfg, fam, carried, log)
	if err != nil {
		return nil, fmt.Errorf("nftables beside the socket LB: %w", err)
	}
	var include func(*service.Port) bool
	if carried != nil {
		include = func(p *service.Port) bool { return carried(p.Name) }
	}
	return socklb.NewDataplane(socklb.DataplaneConfig{
		Maps: socklb.Config{
			Family:   fam,
			NodeName: cfg.NodeName,
			LB:       lb,
			Include:  include,
		},
		Beside:     beside,
		SyncPeriod: cfg.SyncPeriod,
	})
}

// removeLeftSocketLB removes the socket LB an earlier svcproxy pinned in
// --socklb-pin-path, for a mode that does not use it, saying so in one line.
// Only a path the flag names: every mode has the flag's default, and a mode
// that never asked for the socket LB does not go looking in the machine's
// own bpffs. A failure is logged, not fatal: the mode itself works, and
// --cleanup can try again.
func removeLeftSocketLB(cfg *Config, mode string, log *slog.Logger) {
	if cfg.SocketLBPinPath == "" || !cfg.SocketLBPinPathSet {
		return
	}
	if _, err := os.Stat(cfg.SocketLBPinPath); err != nil {
		return // nothing pinned (or nothing we may look at)
	}
	if err := cleanupSocketLB(cfg); err != nil {
		log.Warn("cannot remove the socket LB an earlier svcproxy pinned; it still rewrites connect() (svcproxy --cleanup)",
			"path", cfg.SocketLBPinPath, "mode", mode, "err", err)
		return
	}
	log.Info("removed the socket LB an earlier svcproxy pinned: this mode does not use it", "path", cfg.SocketLBPinPath, "mode", mode)
}
