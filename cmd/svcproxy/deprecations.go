package main

import (
	"log/slog"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/kubeproxyconfig"
)

// ipvsDeprecation is kube-proxy's own warning, word for word
// (cmd/kube-proxy/app/server_linux.go, createProxier, v1.37.2), so an operator
// who searches the logs of a node for it finds it whichever proxy runs there.
const ipvsDeprecation = "The ipvs proxier has been deprecated and will be disabled by default in Kubernetes 1.40 and removed in Kubernetes 1.43. Migrate to the 'nftables' proxier instead."

// logModeChoice says at start what kube-proxy 1.37 says about its mode
// (createProxier and platformApplyDefaults, cmd/kube-proxy/app/server_linux.go,
// v1.37.2), before the dataplane is built:
//
//   - a mode that was defaulted, not chosen: kube-proxy warns that its default
//     (iptables) becomes nftables in Kubernetes 1.40 and asks for an explicit
//     mode. From kube-proxy's file (--config) svcproxy defaults as kube-proxy,
//     to iptables, and logs kube-proxy's sentence. From its flags svcproxy's
//     default is hybrid, its own choice, so the line names the modes it
//     defaulted to and kube-proxy's default beside them: a node that moves
//     from kube-proxy to svcproxy without --mode changes its dataplane.
//   - IPVS, as --mode or as hybrid's --offload: kube-proxy's deprecation
//     warning. It is logged for the choice, also when the kernel lacks IPVS and
//     the fallback to iptables follows (kube-proxy has no fallback: it stops).
//
// kube-proxy logs both at error level (klog has no warning level) and records
// a Node Event; svcproxy logs a warning and records no Event (it writes nothing
// to the API server).
func logModeChoice(cfg *Config, log *slog.Logger) {
	if cfg.ModeDefaulted && cfg.ConfigFile != "" {
		// kube-proxy's file with an empty mode: kube-proxy's default and words.
		log.Warn(kubeproxyconfig.DefaultedModeWarning, "mode", cfg.Mode)
	} else if cfg.ModeDefaulted {
		log.Warn("No svcproxy mode specified: defaulting to '"+cfg.Mode+"', which offloads hot service ports to '"+cfg.Offload+
			"'. kube-proxy defaults to 'iptables', and to 'nftables' from Kubernetes 1.40. To keep a mode across upgrades and proxies, give --mode explicitly.",
			"mode", cfg.Mode, "offload", cfg.Offload)
	}
	switch {
	case cfg.Mode == dataplane.ModeIPVS:
		log.Warn(ipvsDeprecation, "mode", cfg.Mode)
	case cfg.Mode == dataplane.ModeHybrid && cfg.Offload == dataplane.ModeIPVS:
		log.Warn(ipvsDeprecation, "mode", cfg.Mode, "offload", cfg.Offload)
	}
}
