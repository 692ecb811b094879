package topology

import (
	"bytes"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./lab -update to create it")
	require.Equal(t, string(want), got)
}

func TestPlanCommands(t *testing.T) {
	var b strings.Builder
	for _, argv := range DefaultPlan().Commands() {
		b.WriteString(strings.Join(argv, " ") + "\n")
	}
	golden(t, "plan.golden", b.String())
}

// Every command names a lab namespace: nothing may touch the machine's own.
func TestPlanCommandsStayInNamespaces(t *testing.T) {
	p := DefaultPlan()
	for _, argv := range p.Commands() {
		line := strings.Join(argv, " ")
		ok := strings.HasPrefix(line, "ip netns add "+p.Prefix) ||
			strings.HasPrefix(line, "ip -n "+p.Prefix) ||
			strings.HasPrefix(line, "ip netns exec "+p.Prefix)
		require.True(t, ok, "command outside the lab's Namespaces: %s", line)
	}
}

func TestPlanValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(p *Plan)
		want   string
	}{
		{"default", func(*Plan) {}, ""},
		{"duplicate name", func(p *Plan) { p.Hosts[1].Name = "client" }, "host client: name: used twice"},
		{"duplicate addr", func(p *Plan) { p.Hosts[2].Addr = p.Hosts[1].Addr }, "addr 198.19.1.10: used twice"},
		{"addr outside", func(p *Plan) { p.Hosts[0].Addr = netip.MustParseAddr("10.0.0.1") }, "not in the cluster range"},
		{"long link", func(p *Plan) { p.Hosts[0].NodeLink = "veth-much-too-long" }, "node link \"veth-much-too-long\": must be 1 to 15 characters"},
		{"dns outside", func(p *Plan) { p.DNS = netip.MustParseAddr("198.19.0.10") }, "not in the service range"},
		{"slash", func(p *Plan) { p.Hosts[0].Name = "a/b" }, "without slashes"},
		{"duplicate addr6", func(p *Plan) { p.Hosts[2].Addr6 = p.Hosts[1].Addr6 }, "host web-1: addr6 2001:db8:19::1:10: used twice"},
		{"addr6 outside", func(p *Plan) { p.Hosts[0].Addr6 = netip.MustParseAddr("2001:db8:20::1") }, "addr6 2001:db8:20::1: not in the cluster range 2001:db8:19::/104"},
		{"outside addr6 inside", func(p *Plan) { p.Hosts[6].Addr6 = netip.MustParseAddr("2001:db8:19::3") }, "host outside: addr6 2001:db8:19::3: want an address of the lab range"},
		{"addr6 missing", func(p *Plan) { p.Hosts[1].Addr6 = netip.Addr{} }, "host web-0: addr6 \"invalid IP\": want an IPv6 address"},
		{"pod range beyond the cluster", func(p *Plan) { p.PodCIDR = netip.MustParsePrefix("198.19.200.0/24") }, "pod range 198.19.200.0/24: want an IPv4 range of 4 addresses or more in the cluster range 198.19.0.0/17"},
		{"pod range over the pool", func(p *Plan) { p.PodCIDR = netip.MustParsePrefix("198.19.2.0/23") }, "overlaps the lab kubelet's pod pool"},
		{"pod range over a host", func(p *Plan) { p.PodCIDR = netip.MustParsePrefix("198.19.1.0/24") }, "pod range 198.19.1.0/24: holds host client's address 198.19.1.2"},
		{"single-stack", func(p *Plan) {
			p.ServiceCIDR6, p.ClusterCIDR6, p.LabCIDR6 = netip.Prefix{}, netip.Prefix{}, netip.Prefix{}
			for i := range p.Hosts {
				p.Hosts[i].Addr6 = netip.Addr{}
			}
			p.Node.Addr6 = netip.Addr{}
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := DefaultPlan()
			tt.change(p)
			err := p.Validate()
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestIPv6Of(t *testing.T) {
	p := DefaultPlan()
	for v4, v6 := range map[string]string{
		"198.19.0.1":   "2001:db8:19::1",
		"198.19.1.10":  "2001:db8:19::1:10",
		"198.19.200.2": "2001:db8:19::200:2",
		"198.19.2.255": "2001:db8:19::2:255",
		"198.18.0.24":  "2001:db8:18::24",
		"10.0.0.1":     "invalid IP",
	} {
		require.Equal(t, v6, p.IPv6Of(netip.MustParseAddr(v4)).String(), v4)
	}
}

func TestResolvConf(t *testing.T) {
	require.Equal(t, `# written by svclab, as the kubelet writes a pod's
nameserver 198.18.0.10
search default.svc.cluster.local svc.cluster.local cluster.local
options ndots:5
`, DefaultPlan().ResolvConf())
}

func TestWriteHosts(t *testing.T) {
	var b strings.Builder
	require.NoError(t, DefaultPlan().WriteHosts(&b, "iptables"))
	golden(t, "hosts.golden", b.String())
}

// Hosts' rows are the table `svclab up` prints (testdata/hosts.golden).
func TestHostRowsWriteTheTable(t *testing.T) {
	p := DefaultPlan()
	rows := p.HostRows("svcproxy --mode userspace, clusterdns on :53", p.Hosts)
	require.Equal(t, "node", rows[0].Name)
	require.Equal(t, RoleNode, rows[0].Role)
	var a, b bytes.Buffer
	require.NoError(t, WriteHostRows(&a, rows))
	require.NoError(t, p.WriteHosts(&b, "userspace"))
	require.Equal(t, b.String(), a.String())
	require.Contains(t, a.String(), "svclab pod (")
}
