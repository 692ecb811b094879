package kubeproxyconfig

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/kube-proxy/config/v1alpha1"
	"sigs.k8s.io/yaml"

	"github.com/svcproxy/svcproxy/internal/k8sbin"
)

// The cases of testdata/kube-proxy: NAME.args holds kube-proxy's arguments,
// one a line (paths relative to that directory); NAME.yaml what the real
// kube-proxy v1.37.2 wrote given them and --write-config-to.
func kubeProxyCases(t *testing.T) []string {
	t.Helper()
	names, err := filepath.Glob("testdata/kube-proxy/*.args")
	if err != nil || len(names) == 0 {
		t.Fatalf("no cases in testdata/kube-proxy: %v", err)
	}
	for i, n := range names {
		names[i] = strings.TrimSuffix(filepath.Base(n), ".args")
	}
	return names
}

func caseArgs(t *testing.T, name string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata/kube-proxy", name+".args"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// TestKubeProxyDefaults gives Flags each case's arguments and compares the
// configuration it completes with the one the real kube-proxy wrote, field
// by field: the defaults of the decoder and of the flags, the rule for flags
// beside --config, and the platform's defaults.
func TestKubeProxyDefaults(t *testing.T) {
	for _, name := range kubeProxyCases(t) {
		t.Run(name, func(t *testing.T) {
			want := readWritten(t, filepath.Join("testdata/kube-proxy", name+".yaml"))
			args := caseArgs(t, name)
			t.Chdir("testdata/kube-proxy")
			fs := flag.NewFlagSet("kube-proxy", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f := AddFlags(fs)
			// kube-proxy was given --write-config-to too, which turns
			// --healthz-port and --metrics-port off (Options.Complete).
			// The arguments are spelt as for pflag (spelling.args):
			// NormalizeArgs reads them as cmd/svcproxy does.
			if err := fs.Parse(NormalizeArgs(fs, append(args, "--write-config-to=out.yaml"))); err != nil {
				t.Fatal(err)
			}
			cfg, _, err := f.Complete()
			if err != nil {
				t.Fatal(err)
			}
			// Compared as they serialize: two equal files can differ in
			// what a value caches (a quantity's string, a nil or empty map).
			gb, _ := yaml.Marshal(kubeProxyView(cfg))
			wb, _ := yaml.Marshal(want)
			if !bytes.Equal(gb, wb) {
				t.Errorf("svcproxy's configuration for %s:\n%s\nkube-proxy's:\n%s", name, gb, wb)
			}
		})
	}
}

// readWritten reads a file kube-proxy wrote, as it is: strictly, without
// defaulting it again.
func readWritten(t *testing.T, file string) *v1alpha1.KubeProxyConfiguration {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var cfg v1alpha1.KubeProxyConfiguration
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return &cfg
}

// kubeProxyView is cfg as kube-proxy holds it and writes it back: its
// internal configuration has one sync period, one minimum and one
// masqueradeAll, taken from the section of the mode and written back there
// only, and no portRange
// (Convert_v1alpha1_KubeProxyConfiguration_To_config_KubeProxyConfiguration
// and back, pkg/proxy/apis/config/v1alpha1/conversion.go).
func kubeProxyView(cfg *v1alpha1.KubeProxyConfiguration) *v1alpha1.KubeProxyConfiguration {
	c := cfg.DeepCopy()
	c.SetGroupVersionKind(v1alpha1.SchemeGroupVersion.WithKind("KubeProxyConfiguration"))
	ipt, ipvs, nft := &c.IPTables, &c.IPVS, &c.NFTables
	switch c.Mode {
	case ModeNFTables:
		ipt.MasqueradeAll = false
	default:
		nft.MasqueradeAll = false
	}
	keep := c.Mode
	if keep != ModeIPVS && keep != ModeNFTables {
		keep = ModeIPTables
	}
	if keep != ModeIPTables {
		ipt.SyncPeriod.Duration, ipt.MinSyncPeriod.Duration = 0, 0
	}
	if keep != ModeIPVS {
		ipvs.SyncPeriod.Duration, ipvs.MinSyncPeriod.Duration = 0, 0
	}
	if keep != ModeNFTables {
		nft.SyncPeriod.Duration, nft.MinSyncPeriod.Duration = 0, 0
	}
	c.PortRange = ""
	return c
}

// TestKubeProxyWritesTestdata runs the real kube-proxy v1.37.2 (built by
// internal/k8sbin, when cached) with each case's arguments and
// --write-config-to, and checks that it writes testdata/kube-proxy's file;
// -update rewrites the files from it.
func TestKubeProxyWritesTestdata(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bins, err := k8sbin.Build(ctx, k8sbin.Config{KubeProxy: true, CachedOnly: true})
	if errors.Is(err, k8sbin.ErrNotBuilt) || errors.Is(err, k8sbin.ErrUnavailable) {
		t.Skipf("needs kube-proxy v1.37.2 in the cache: make cluster-bins (%v)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range kubeProxyCases(t) {
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out.yaml")
			cmd := exec.CommandContext(ctx, bins.KubeProxy, append(caseArgs(t, name), "--write-config-to="+out)...)
			cmd.Dir = "testdata/kube-proxy"
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("kube-proxy %s: %v\n%s", name, err, b)
			}
			got, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join("testdata/kube-proxy", name+".yaml")
			if *update {
				if err := os.WriteFile(file, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(file)
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("kube-proxy wrote for %s:\n%s\ntestdata has (%v):\n%s", name, got, err, want)
			}
		})
	}
}

var update = flag.Bool("update", false, "rewrite testdata/kube-proxy's files from the real kube-proxy")

// TestKubeProxyHelp runs the real kube-proxy v1.37.2's --help (when
// internal/k8sbin has it cached) and checks that AddFlags registers every
// flag it documents, and none it does not but its two deprecated ones.
func TestKubeProxyHelp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bins, err := k8sbin.Build(ctx, k8sbin.Config{KubeProxy: true, CachedOnly: true})
	if errors.Is(err, k8sbin.ErrNotBuilt) || errors.Is(err, k8sbin.ErrUnavailable) {
		t.Skipf("needs kube-proxy v1.37.2 in the cache: make cluster-bins (%v)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, bins.KubeProxy, "--help").Output()
	if err != nil {
		t.Fatalf("kube-proxy --help: %v", err)
	}
	// pflag's usage lines: "      --config string   ..." or "  -v, --v Level ...".
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-[a-z], )?--([a-z0-9-]+)`).FindAllStringSubmatch(string(out), -1) {
		documented[m[1]] = true
	}
	delete(documented, "help") // Go's flag package answers -h and --help by itself
	if len(documented) < 50 {
		t.Fatalf("only %d flags found in kube-proxy --help:\n%s", len(documented), out)
	}
	fs := flag.NewFlagSet("kube-proxy", flag.ContinueOnError)
	AddFlags(fs)
	registered := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { registered[f.Name] = true })
	for _, name := range slices.Sorted(maps.Keys(documented)) {
		if !registered[name] {
			t.Errorf("kube-proxy documents --%s; AddFlags does not register it", name)
		}
	}
	// pflag leaves deprecated flags out of the help, and kube-proxy marks
	// these two so; they still work.
	documented["healthz-port"], documented["metrics-port"] = true, true
	for _, name := range slices.Sorted(maps.Keys(registered)) {
		if !documented[name] {
			t.Errorf("AddFlags registers --%s; kube-proxy v1.37.2 does not document it", name)
		}
	}
}
