package views

import (
	"fmt"
	"os"
	"testing"

	"sigs.k8s.io/knftables"

	knft "github.com/svcproxy/svcproxy/kernel/nftables"
	"github.com/svcproxy/svcproxy/lab/topology"

	"github.com/stretchr/testify/require"
)

// A hybrid lab's kernel counters: two connections iptables sent to web-0
// and one to web-1, and a promoted UDP port that nftables counted.
const (
	saveWithCounters = `*nat
:SVCP-SEP-AAAAAAAAAAAAAAAA - [0:0]
:SVCP-SEP-BBBBBBBBBBBBBBBB - [0:0]
[0:0] -A SVCP-SEP-AAAAAAAAAAAAAAAA -s 198.19.1.10/32 -m comment --comment "default/web:http" -j MARK --set-xmark 0x4000/0x4000
[2:120] -A SVCP-SEP-AAAAAAAAAAAAAAAA -p tcp -m comment --comment "default/web:http" -m tcp -j DNAT --to-destination 198.19.1.10:8080
[1:60] -A SVCP-SEP-BBBBBBBBBBBBBBBB -p tcp -m comment --comment "default/web:http" -m tcp -j DNAT --to-destination 198.19.1.11:8080
COMMIT
`
	nftWithCounters = `table ip svcproxy {
	counter connections-HAOI4LZB-default/echo/udp/echo {
		packets 7 bytes 420
	}
	chain services {
		type nat hook prerouting priority dstnat - 1; policy accept;
	}
}
`
)

func TestKernelCountersParse(t *testing.T) {
	kc := &KernelCounters{Ports: map[string]uint64{}, Endpoints: map[string]map[string]uint64{}}
	require.NoError(t, kc.addSave(saveWithCounters))
	tab, err := knft.ParseListing(nftWithCounters)
	require.NoError(t, err)
	require.Equal(t, map[string]uint64{"connections-HAOI4LZB-default/echo/udp/echo": 7}, tab.Packets)
	var counters []*knftables.Counter // as knftables' ListCounters gives them
	for name, n := range tab.Packets {
		counters = append(counters, &knftables.Counter{Name: name, Packets: &n})
	}
	kc.addNFT(counters)
	require.Equal(t, map[string]uint64{"default/web:http": 3, "default/echo:echo/UDP": 7}, kc.Ports)
	require.Equal(t, map[string]uint64{"198.19.1.10:8080": 2, "198.19.1.11:8080": 1}, kc.Endpoints["default/web:http"])
}

func TestCounterPort(t *testing.T) {
	for name, want := range map[string]string{
		"connections-HAOI4LZB-default/echo/udp/echo":            "default/echo:echo/UDP",
		"connections-ABCDEFGH-default/web/tcp/http":             "default/web:http",
		"connections-ABCDEFGH-kube-system/kube-dns/tcp/dns-tcp": "kube-system/kube-dns:dns-tcp",
		"accepted":                   "",
		"connections-nohash":         "",
		"connections-HASH-too/short": "",
	} {
		got, ok := counterPort(name)
		require.Equal(t, want != "", ok, name)
		require.Equal(t, want, got, name)
	}
}

// servicesView joins the Snapshot (endpoints and their conditions),
// hybrid's /status (each port's path, the userspace counters) and the
// kernel's counters.
func TestServicesView(t *testing.T) {
	vs := New(Config{Net: topology.New(topology.Config{StateDir: t.TempDir()})})
	status := `{"mode":"hybrid","offload":"iptables",
	  "ports":[{"name":"default/web:http","path":"iptables"},{"name":"default/echo:echo/UDP","path":"userspace"}],
	  "userspace":{"ports":[{"name":"default/web:http","counters":{"connectionsOpened":40}},{"name":"default/echo:echo/UDP","counters":{"connectionsOpened":5}}]},
	  "kernel":{}}`
	kc := &KernelCounters{Ports: map[string]uint64{}, Endpoints: map[string]map[string]uint64{}}
	require.NoError(t, kc.addSave(saveWithCounters))
	v, err := vs.servicesView(loadManifests(t), []byte(status), kc)
	require.NoError(t, err)
	require.Equal(t, "hybrid", v.Mode)
	require.Equal(t, "iptables", v.Offload)
	byName := map[string]ServicePortView{}
	for _, p := range v.Ports {
		byName[p.Name] = p
	}
	require.NotContains(t, byName, "default/db:http", "a headless Service has nothing to proxy")
	web := byName["default/web:http"]
	require.Equal(t, "iptables", web.Path)
	require.Equal(t, []string{"198.18.0.20"}, web.VIPs)
	require.Equal(t, uint64(40), web.Userspace)
	require.Equal(t, uint64(3), web.Kernel)
	require.Len(t, web.Endpoints, 3)
	require.Equal(t, EndpointView{Addr: "198.19.1.10:8080", Pod: "web-0", Ready: true, Serving: true, Kernel: 2}, web.Endpoints[0])
	echo := byName["default/echo:echo/UDP"]
	require.Equal(t, "userspace", echo.Path)
	require.Equal(t, uint64(5), echo.Userspace)
	// A port the promoter has not sampled yet is in userspace.
	require.Equal(t, "userspace", byName["default/web-sticky:http"].Path)

	// Before its first sample the promoter has no ports.
	v, err = vs.servicesView(loadManifests(t), []byte(`{"mode":"hybrid","offload":"nftables"}`), kc)
	require.NoError(t, err)
	require.Equal(t, "userspace", v.Ports[0].Path)
	v, err = vs.servicesView(loadManifests(t), []byte(`{"mode":"nftables","ports":[]}`), kc)
	require.NoError(t, err)
	for _, p := range v.Ports {
		require.Equal(t, "nftables", p.Path, p.Name)
	}
	_, err = vs.servicesView(loadManifests(t), []byte(`not json`), kc)
	require.ErrorContains(t, err, "svcproxy /status")
}

// status-hybrid-dualstack.json is svcproxy's /status in the lab (`svclab up
// --mode hybrid`, `svclab traffic --n 100 --rate 30 web`): one document per
// family, web's port promoted to nftables in IPv4 after 83 connections
// through userspace.
func TestServicesViewDualStack(t *testing.T) {
	vs := New(Config{Net: topology.New(topology.Config{StateDir: t.TempDir()})})
	b, err := os.ReadFile("testdata/status-hybrid-dualstack.json")
	require.NoError(t, err)
	kc := &KernelCounters{Ports: map[string]uint64{"default/web:http": 17}}
	v, err := vs.servicesView(loadManifests(t), b, kc)
	require.NoError(t, err)
	require.Equal(t, "hybrid", v.Mode)
	require.Equal(t, "nftables", v.Offload)
	got := map[string]string{}
	for _, p := range v.Ports {
		got[p.Name] = fmt.Sprintf("%s %d %d", p.Path, p.Userspace, p.Kernel)
	}
	require.Equal(t, "nftables 83 17", got["default/web:http"])
	require.Equal(t, "userspace 0 0", got["default/web-dual:http"])
	require.Equal(t, "userspace 1 0", got["kube-system/kube-dns:dns/UDP"])
}

// Every mode says what the kernel column counts, and the modes where the
// kernel counts nothing the page reads say so rather than show a 0 as if
// it were measured.
func TestKernelCounts(t *testing.T) {
	for _, tt := range []struct {
		mode, offload string
		counted       bool
	}{
		{"userspace", "", false}, {"iptables", "", true}, {"nftables", "", false}, {"ipvs", "", false}, {"socklb", "", true},
		{"hybrid", "", true}, {"hybrid", "nftables", true}, {"hybrid", "iptables", true}, {"hybrid", "socklb", true}, {"hybrid", "ipvs", false},
	} {
		note, counted := kernelCounts(tt.mode, tt.offload)
		require.NotEmpty(t, note, "%s %s", tt.mode, tt.offload)
		require.Equal(t, tt.counted, counted, "%s %s: %s", tt.mode, tt.offload, note)
	}
}
