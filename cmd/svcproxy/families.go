package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/svcproxy/svcproxy/dataplane"
	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/service"
)

// servedFamilies are the IP families this node serves in mode (hybrid's
// kernel path: offloadMode): IPv4, and IPv6 when the namespace has IPv6 and
// ip6tables works, as kube-proxy runs dual-stack when both families'
// iptables are present. Why IPv6 is not served is logged once.
func servedFamilies(cfg *Config, mode, offloadMode string, log *slog.Logger) []service.Family {
	fams := []service.Family{service.IPv4}
	if err := ipv6Supported(mode, offloadMode); err != nil {
		log.Info("serving IPv4 only", "reason", err)
		return fams
	}
	return append(fams, service.IPv6)
}

// ipv6Supported says why this namespace (or mode) cannot serve IPv6, or nil.
func ipv6Supported(mode, offloadMode string) error {
	switch {
	case mode == dataplane.ModeIPTables, mode == dataplane.ModeIPVS, mode == dataplane.ModeUserspace, mode == dataplane.ModeNFTables:
	case mode == dataplane.ModeHybrid && offloadMode != dataplane.ModeIPVS:
		// Each family's hybrid promotes its own ports (a Promoter per family).
	case mode == dataplane.ModeHybrid:
		return fmt.Errorf("--mode hybrid --offload %s serves IPv4 only (see docs/operations.md, Dual-stack)", offloadMode)
	default:
		return fmt.Errorf("--mode %s serves IPv4 only (see docs/operations.md, Dual-stack)", mode)
	}
	b, err := os.ReadFile("/proc/sys/net/ipv6/conf/all/disable_ipv6")
	switch {
	case errors.Is(err, os.ErrNotExist):
		return errors.New("the kernel has no IPv6")
	case err != nil:
		return fmt.Errorf("IPv6: %w", err)
	case strings.TrimSpace(string(b)) != "0":
		return errors.New("IPv6 is disabled in this network namespace (net.ipv6.conf.all.disable_ipv6=1)")
	}
	if _, err := kiptables.New(kiptables.Config{Family: kiptables.IPv6}); err != nil {
		return err
	}
	return nil
}
