package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/internal/netnstest"
)

// What svcproxy says at start about its mode, as kube-proxy 1.37 does: a
// defaulted mode, and IPVS's deprecation (kube-proxy's words).
func TestLogModeChoice(t *testing.T) {
	defaulted := func(offload string) string {
		return `level=WARN msg="No svcproxy mode specified: defaulting to 'hybrid', which offloads hot service ports to '` + offload + `'. ` +
			`kube-proxy defaults to 'iptables', and to 'nftables' from Kubernetes 1.40. To keep a mode across upgrades and proxies, give --mode explicitly." mode=hybrid offload=` + offload
	}
	const ipvs = `level=WARN msg="The ipvs proxier has been deprecated and will be disabled by default in Kubernetes 1.40 and removed in Kubernetes 1.43. Migrate to the 'nftables' proxier instead."`
	for _, tt := range []struct {
		name string
		args []string
		want []string // the lines, without their time
	}{
		{"no --mode", nil, []string{defaulted("nftables")}},
		{"--mode hybrid, chosen", []string{"--mode", "hybrid"}, nil},
		{"--mode given as its default value", []string{"--mode=hybrid"}, nil},
		{"--mode iptables", []string{"--mode", "iptables"}, nil},
		{"--mode nftables", []string{"--mode", "nftables"}, nil},
		{"--mode ipvs", []string{"--mode", "ipvs"}, []string{ipvs + " mode=ipvs"}},
		{"--mode hybrid --offload ipvs", []string{"--mode", "hybrid", "--offload", "ipvs"}, []string{ipvs + " mode=hybrid offload=ipvs"}},
		{"--offload ipvs, mode defaulted", []string{"--offload", "ipvs"}, []string{defaulted("ipvs"), ipvs + " mode=hybrid offload=ipvs"}},
		{"--offload ipvs outside hybrid", []string{"--mode", "iptables", "--offload", "ipvs"}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseFlags(tt.args)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			logModeChoice(cfg, slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{
				ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
					if a.Key == slog.TimeKey {
						return slog.Attr{}
					}
					return a
				},
			})))
			got := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
			if b.Len() == 0 {
				got = nil
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("logged:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// The process itself, started without --mode, says which mode it defaulted
// to before it starts (TestIPVSFallback checks the IPVS warning likewise).
func TestDefaultedModeLogged(t *testing.T) {
	netnstest.RequireRoot(t, "iptables-restore", "iptables-save")
	var defaulted []string
	for _, line := range startHelper(t, netnstest.New(t), "--hostname-override", "node") {
		if strings.Contains(line, "No svcproxy mode specified") {
			defaulted = append(defaulted, line)
		}
	}
	if len(defaulted) != 1 || !strings.Contains(defaulted[0], "mode=hybrid") || !strings.Contains(defaulted[0], "level=WARN") {
		t.Errorf("want one warning naming the defaulted mode, hybrid: %q", defaulted)
	}
}
