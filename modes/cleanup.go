package modes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/svcproxy/svcproxy/dataplane"

	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	knft "github.com/svcproxy/svcproxy/kernel/nftables"
	"github.com/svcproxy/svcproxy/kernel/socklb/lifecycle"
	offloadiptables "github.com/svcproxy/svcproxy/offload/iptables"
	offloadipvs "github.com/svcproxy/svcproxy/offload/ipvs"
	offloadnftables "github.com/svcproxy/svcproxy/offload/nftables"
	"github.com/svcproxy/svcproxy/service"
	"github.com/svcproxy/svcproxy/userspace"
)

// Cleanup removes what every mode may have left in this namespace, in both IP
// families (--cleanup): the portals, the iptables rules, IPVS's virtual
// servers, addresses and masquerade rules, the socket LB's pins
// (cfg.SocketLB.PinPath) and the nftables tables. Nothing there is no error.
func Cleanup(ctx context.Context, cfg Config) error {
	return cleanupParts(ctx, cfg, nil)
}

// The parts cleanupParts knows: what each mode leaves in the namespace.
const (
	partUserspace = "userspace portals"
	partIPTables  = "iptables rules"
	partIPVS      = "ipvs"
	partNFTables  = "nftables table"
	partSocketLB  = "socket LB pins"
)

// CleanupOthers removes, before the dataplane starts, what the modes other
// than cfg's left in this namespace: kube-proxy's platformCleanup
// (cmd/kube-proxy/app/server_linux.go) does it at every start, so that a mode
// switched in the ConfigMap, whose pods are then deleted, leaves no rules of
// the old mode behind (kubeadm's DaemonSet has no cleanup step of its own).
// What cfg's mode made stays: a restart adopts it. A mode whose kernel lacks
// it keeps iptables' rules too, its fallback's (kernelMode). A failure is
// logged to cfg.Logger: the mode starts all the same.
func CleanupOthers(ctx context.Context, cfg Config) {
	keep := map[string]bool{}
	modes := []string{cfg.Mode}
	if cfg.Mode == dataplane.ModeHybrid {
		keep[partUserspace] = true
		modes = []string{cfg.Offload}
	}
	for _, m := range modes {
		switch m {
		case dataplane.ModeUserspace:
			keep[partUserspace] = true
		case dataplane.ModeIPTables:
			keep[partIPTables] = true
		case dataplane.ModeIPVS:
			keep[partIPVS] = true
			keep[partIPTables] = offloadipvs.Available() != nil
		case dataplane.ModeNFTables:
			keep[partNFTables] = true
			keep[partIPTables] = knft.Available() != nil
		case dataplane.ModeSocketLB:
			keep[partSocketLB], keep[partNFTables] = true, true
		}
	}
	if err := cleanupParts(ctx, cfg, keep); err != nil {
		log := cfg.Logger
		if log == nil {
			log = slog.Default()
		}
		log.Warn("other modes' leftovers not all removed", "err", err)
	}
}

// cleanupParts removes every part of what svcproxy makes but those in keep.
func cleanupParts(ctx context.Context, cfg Config, keep map[string]bool) error {
	var errs []error
	for _, fam := range service.Families {
		ipt, err := kiptables.New(kiptables.Config{Family: kiptables.Family(fam)})
		if err != nil {
			if fam == service.IPv6 {
				continue // no ip6tables: there can be no IPv6 rules of ours
			}
			return err
		}
		if !keep[partUserspace] {
			if err := userspace.Cleanup(ctx, ipt); err != nil {
				errs = append(errs, fmt.Errorf("%s userspace portals: %w", fam, err))
			}
		}
		if !keep[partIPTables] {
			if err := offloadiptables.Cleanup(ctx, ipt); err != nil {
				errs = append(errs, fmt.Errorf("%s iptables rules: %w", fam, err))
			}
		}
		if !keep[partIPVS] && offloadipvs.Available() == nil {
			if err := cleanupIPVS(ctx, &cfg, fam, ipt); err != nil {
				errs = append(errs, fmt.Errorf("%s ipvs: %w", fam, err))
			}
		}
	}
	if !keep[partSocketLB] {
		if err := lifecycle.Remove(cfg.SocketLB.PinPath); err != nil {
			errs = append(errs, fmt.Errorf("socket LB pins in %s: %w", cfg.SocketLB.PinPath, err))
		}
	}
	if !keep[partNFTables] && knft.Available() == nil {
		for _, fam := range service.Families {
			family := offloadnftables.TableFamily(fam)
			nft, err := knft.NewFamily(family, offloadnftables.Table)
			if err == nil {
				err = offloadnftables.Cleanup(ctx, nft)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("nftables table %s %s: %w", family, offloadnftables.Table, err))
			}
		}
	}
	return errors.Join(errs...)
}

// cleanupIPVS removes svcproxy's virtual servers, service IPs (and, with the
// last of them, the dummy interface), masquerade rules and ip sets of family
// fam. Without the ipset tool there can be none of the last two. The NodePort
// virtual servers are known by their address, a node address
// (--nodeport-addresses), and port.
func cleanupIPVS(ctx context.Context, cfg *Config, fam service.Family, ipt kiptables.Interface) error {
	f := newFamily(cfg, fam, nil)
	if f.err != nil {
		return f.err
	}
	f.ipt = ipt
	ic, err := f.ipvs()
	for _, k := range []any{ic.IPVS, ic.Links} {
		if c, ok := k.(interface{ Close() }); ok {
			defer c.Close()
		}
	}
	switch {
	case ic.IPVS == nil || ic.Links == nil:
		return err
	case err != nil: // no ipset tool: no masquerade rules either
		ic.IPTables, ic.IPSets = nil, nil
	}
	d, err := offloadipvs.New(ic)
	if err != nil {
		return err
	}
	return d.Cleanup(ctx)
}
