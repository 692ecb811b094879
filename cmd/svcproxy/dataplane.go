package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/svcproxy/svcproxy/kernel/iptables"
	offloadiptables "github.com/svcproxy/svcproxy/offload/iptables"
	offloadipvs "github.com/svcproxy/svcproxy/offload/ipvs"
	"github.com/svcproxy/svcproxy/userspace"
)

// newDataplane builds the dataplane of cfg.Mode in the current network
// namespace.
func newDataplane(cfg *Config, log *slog.Logger) (dataplane, error) {
	ipt, err := iptables.New(iptables.Config{})
	if err != nil {
		return nil, err
	}
	mode := cfg.Mode
	if mode == modeIPVS {
		if err := offloadipvs.Available(); err != nil {
			// kube-proxy does the same: IPVS mode on a kernel without IPVS runs
			// iptables mode, and says why once.
			log.Warn("IPVS not available, running iptables mode instead", "reason", err)
			mode = modeIPTables
		}
	}
	switch mode {
	case modeUserspace:
		return newUserspace(cfg, ipt)
	case modeIPTables:
		return newIPTables(cfg, ipt, log, nil)
	case modeIPVS:
		return newIPVS(cfg, ipt, log, nil)
	case modeHybrid:
		return newHybrid(cfg, ipt, log)
	}
	return nil, fmt.Errorf("--mode %s: not built yet", cfg.Mode)
}

// cleanup removes what every mode may have left in this namespace.
func cleanup(ctx context.Context, log *slog.Logger) error {
	ipt, err := iptables.New(iptables.Config{})
	if err != nil {
		return err
	}
	var errs []error
	if err := userspace.Cleanup(ctx, ipt); err != nil {
		errs = append(errs, fmt.Errorf("userspace portals: %w", err))
	}
	if err := offloadiptables.Cleanup(ctx, ipt); err != nil {
		errs = append(errs, fmt.Errorf("iptables rules: %w", err))
	}
	if offloadipvs.Available() == nil {
		if err := cleanupIPVS(ctx, ipt); err != nil {
			errs = append(errs, fmt.Errorf("ipvs: %w", err))
		}
	}
	return errors.Join(errs...)
}
