package modes

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

// servedFamilies are the IP families this node serves in mode: IPv4, and
// IPv6 when the namespace has IPv6 and ip6tables works, as kube-proxy runs
// dual-stack when both families' iptables are present. Why IPv6 is not served
// is logged once.
func servedFamilies(mode string, log *slog.Logger) []service.Family {
	fams := []service.Family{service.IPv4}
	if err := ipv6Supported(mode); err != nil {
		log.Info("serving IPv4 only", "reason", err)
		return fams
	}
	return append(fams, service.IPv6)
}

// ipv6Supported says why this namespace (or mode) cannot serve IPv6, or nil.
// Every mode serves both families; hybrid mode, whatever its kernel path
// (--offload), runs a hybrid per family, each promoting its own ports (a
// Promoter per family).
func ipv6Supported(mode string) error {
	switch mode {
	case dataplane.ModeIPTables, dataplane.ModeIPVS, dataplane.ModeUserspace, dataplane.ModeNFTables, dataplane.ModeSocketLB, dataplane.ModeHybrid:
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
