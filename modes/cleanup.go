package modes

import (
	"context"
	"errors"
	"fmt"

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
	var errs []error
	for _, fam := range service.Families {
		ipt, err := kiptables.New(kiptables.Config{Family: kiptables.Family(fam)})
		if err != nil {
			if fam == service.IPv6 {
				continue // no ip6tables: there can be no IPv6 rules of ours
			}
			return err
		}
		if err := userspace.Cleanup(ctx, ipt); err != nil {
			errs = append(errs, fmt.Errorf("%s userspace portals: %w", fam, err))
		}
		if err := offloadiptables.Cleanup(ctx, ipt); err != nil {
			errs = append(errs, fmt.Errorf("%s iptables rules: %w", fam, err))
		}
		if offloadipvs.Available() == nil {
			if err := cleanupIPVS(ctx, &cfg, fam, ipt); err != nil {
				errs = append(errs, fmt.Errorf("%s ipvs: %w", fam, err))
			}
		}
	}
	if err := lifecycle.Remove(cfg.SocketLB.PinPath); err != nil {
		errs = append(errs, fmt.Errorf("socket LB pins in %s: %w", cfg.SocketLB.PinPath, err))
	}
	if knft.Available() == nil {
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
