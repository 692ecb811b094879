package main

import (
	"errors"
	"fmt"
	"log/slog"

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

// usesSocketLB says whether mode (with hybrid's offloadMode) runs the socket
// LB, whose programs and maps are one per node, shared by both families.
func usesSocketLB(mode, offloadMode string) bool {
	return mode == dataplane.ModeSocketLB || (mode == dataplane.ModeHybrid && offloadMode == dataplane.ModeSocketLB)
}

// newSocketLB loads the socket LB's programs and attaches them to
// --socklb-cgroup (kernel/socklb.New). It checks first what would otherwise
// fail later with a less clear errno: that the directory is a cgroup v2 one,
// and that nft is there for the path beside.
func newSocketLB(cfg *Config) (*ksocklb.Kernel, error) {
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
	k, err := ksocklb.New(ksocklb.Config{CgroupPath: path})
	if err != nil {
		return nil, fmt.Errorf("--socklb-cgroup %s: %w", path, err)
	}
	return k, nil
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
