package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/kubeproxyconfig"
)

// What svcproxy does, at start, with the parts of kube-proxy's
// configuration that are about the process rather than a dataplane: the log's
// format and verbosity, the OOM score, and saying what it ignores.

// newLogger is the program's logger: log/slog's text or JSON handler on w
// (logging.format), debug lines from verbosity 4 on (klog's V(4), kube-proxy's
// debug level), and client-go's klog at the same verbosity.
func newLogger(cfg *Config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{}
	if cfg.Verbosity >= 4 {
		opts.Level = slog.LevelDebug
	}
	if cfg.Verbosity > 0 {
		var fs flag.FlagSet
		klog.InitFlags(&fs)
		_ = fs.Set("v", strconv.Itoa(cfg.Verbosity))
	}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// logConfig says where the configuration came from, and, one line each,
// what of it svcproxy does not act on: the file's fields (with why) and the
// flags the file overrode.
func logConfig(cfg *Config, log *slog.Logger) {
	if cfg.ConfigFile != "" {
		log.Info("using kube-proxy's configuration file", "file", cfg.ConfigFile, "mode", cfg.Mode)
	}
	for _, f := range cfg.Ignored {
		log.Info("KubeProxyConfiguration field ignored", "field", f.Field, "value", f.Value, "reason", f.Reason)
	}
	if len(cfg.IgnoredFlags) > 0 {
		// kube-proxy ignores them silently; its help says so of some.
		log.Warn("flags ignored: --config is given, and its file says what they would", "flags", strings.Join(cfg.IgnoredFlags, " "))
	}
}

// applyOOMScoreAdj writes oomScoreAdj to /proc/self/oom_score_adj, as
// kube-proxy does at start (newProxyServer: oom.ApplyOOMScoreAdj); a failure
// (an unprivileged container) is logged and svcproxy goes on, as there.
func applyOOMScoreAdj(cfg *Config, log *slog.Logger) {
	if cfg.OOMScoreAdj == nil {
		return
	}
	err := os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(*cfg.OOMScoreAdj)), 0)
	if err != nil {
		log.Warn("cannot set the OOM score", "oomScoreAdj", *cfg.OOMScoreAdj, "err", err)
		return
	}
	log.Debug("OOM score set", "oomScoreAdj", *cfg.OOMScoreAdj)
}

// version is what --version prints: svcproxy's module version (from the
// build's information: "(devel)" for a build from a work tree), and the
// kube-proxy whose command line and file it reads. kube-proxy prints
// "Kubernetes v1.37.2".
func version() string {
	v := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		v = bi.Main.Version
	}
	return "svcproxy " + v + " (kube-proxy v1.37.2's flags and KubeProxyConfiguration v1alpha1)"
}

// writeConfig writes the configuration in force to cfg.WriteConfigTo, as
// kube-proxy's --write-config-to does (YAML, kubeproxy.config.k8s.io/v1alpha1).
func writeConfig(cfg *Config) error {
	b, err := kubeproxyconfig.Encode(cfg.KubeProxy)
	if err != nil {
		return err
	}
	if err := os.WriteFile(cfg.WriteConfigTo, b, 0o644); err != nil {
		return fmt.Errorf("--write-config-to: %w", err)
	}
	return nil
}
