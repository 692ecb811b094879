package dns_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/testbin"
)

// conformanceManifests are the names Kubernetes' DNS conformance tests
// (test/e2e/network/dns.go, k8s.io/kubernetes v1.37.2) ask, as a cluster
// would hold them: the kubernetes Service, a ClusterIP Service with a named
// port, a headless Service whose pods have a hostname and a subdomain
// (dns-querier-2.dns-test-service-2), its namespace, and a running pod.
const conformanceManifests = `
apiVersion: v1
kind: Namespace
metadata: {name: dns-8211}
---
apiVersion: v1
kind: Service
metadata: {name: kubernetes, namespace: default}
spec:
  clusterIP: 198.18.0.1
  ports: [{name: https, port: 443, protocol: TCP}]
---
apiVersion: v1
kind: Service
metadata: {name: dns-test-service, namespace: dns-8211}
spec:
  clusterIP: 198.18.0.30
  clusterIPs: [198.18.0.30, "2001:db8:18::30"]
  ipFamilies: [IPv4, IPv6]
  ports: [{name: http, port: 80, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: dns-test-service-1, namespace: dns-8211, labels: {kubernetes.io/service-name: dns-test-service}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- {addresses: [198.19.2.10]}
---
apiVersion: v1
kind: Service
metadata: {name: dns-test-service-2, namespace: dns-8211}
spec:
  clusterIP: None
  ports: [{name: http, port: 80, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: dns-test-service-2-1, namespace: dns-8211, labels: {kubernetes.io/service-name: dns-test-service-2}}
addressType: IPv4
ports: [{name: http, port: 80, protocol: TCP}]
endpoints:
- {addresses: [198.19.2.11], hostname: dns-querier-2}
---
apiVersion: v1
kind: Pod
metadata: {name: dns-querier-2, namespace: dns-8211}
spec: {hostname: dns-querier-2, subdomain: dns-test-service-2, containers: [{name: c, image: agnhost}]}
status: {phase: Running, podIP: 198.19.2.11}
`

// corefileLab is clusterdns -conf in a "pod" namespace, with what kubeadm's
// Corefile reads around it: its /etc/resolv.conf names the "node"'s
// resolver (the Deployment's dnsPolicy: Default), dnsmasq on 198.19.0.1
// in a namespace of its own behind a veth; a "client" namespace asks it
// over another veth, with a pod's resolv.conf.
type corefileLab struct {
	dns, client *netnstest.NS
	dir         string // the ConfigMap volume: Corefile -> ..data/Corefile
	version     int
	logs        *logBuffer
	cmd         *exec.Cmd
	done        chan error
}

const (
	nodeResolver = "198.19.0.1" // the node's resolver, dnsmasq
	dnsAddr      = "198.19.1.2" // clusterdns's pod
)

// kubeadmCorefileText is kubeadm v1.37.2's Corefile as it is, but for a
// reload interval of 2s (CoreDNS's least) instead of 30s.
func kubeadmCorefileText(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../dnsresolve/corefile/testdata/kubeadm-v1.37.2.Corefile")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Replace(string(b), "    reload\n", "    reload 2s\n", 1)
}

func newCorefileLab(t *testing.T, corefile string) *corefileLab {
	t.Helper()
	netnstest.RequireRoot(t, "dig", "getent", "dnsmasq", "curl", "go")
	bin := filepath.Join(testbin.Build(t, "./cmd/clusterdns"), "clusterdns")
	node, dns, client := netnstest.New(t), netnstest.New(t), netnstest.New(t)
	netnstest.Veth(t, node, "eth0", netip.MustParsePrefix(nodeResolver+"/24"), dns, "eth0", netip.MustParsePrefix("198.19.0.2/24"))
	netnstest.Veth(t, dns, "eth1", netip.MustParsePrefix(dnsAddr+"/24"), client, "eth0", netip.MustParsePrefix("198.19.1.3/24"))
	node.Start(t, "dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts",
		"--pid-file=", "--user=root", "--listen-address="+nodeResolver, "--bind-interfaces",
		"--address=/upstream.test/192.0.2.7", "--local=/test/", "--local=/in-addr.arpa/")
	dns.ResolvConf(t, "nameserver "+nodeResolver+"\n")
	client.ResolvConf(t, "nameserver "+dnsAddr+"\nsearch dns-8211.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n")

	l := &corefileLab{dns: dns, client: client, dir: t.TempDir(), logs: &logBuffer{}, done: make(chan error, 1)}
	services := filepath.Join(t.TempDir(), "services.yaml")
	if err := os.WriteFile(services, []byte(conformanceManifests), 0o644); err != nil {
		t.Fatal(err)
	}
	l.update(t, corefile)
	if err := os.Symlink("..data/Corefile", filepath.Join(l.dir, "Corefile")); err != nil {
		t.Fatal(err)
	}
	// The image's command line: CoreDNS's -conf, and where Services come from.
	l.cmd = dns.Command(context.Background(), bin, "-conf", filepath.Join(l.dir, "Corefile"), "--services", services, "-v", "debug")
	l.cmd.Stdout, l.cmd.Stderr = l.logs, l.logs
	if err := l.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { l.done <- l.cmd.Wait() }()
	t.Cleanup(func() {
		_ = l.cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-l.done:
			if err != nil {
				t.Errorf("clusterdns exit: %v", err)
			}
		case <-time.After(20 * time.Second):
			_ = l.cmd.Process.Kill()
			t.Errorf("clusterdns did not stop within 20s of SIGINT")
		}
		if t.Failed() {
			t.Logf("clusterdns log:\n%s", l.logs)
		}
	})
	// Ask nothing before the ready plugin says 200 (kubeadm's Corefile has it
	// on :8181): a query sent before the socket is bound gets an ICMP port
	// unreachable, and the kernel rate-limits those per peer, so dig's
	// third try in a row may hear nothing and wait out its 5 s timeout.
	l.waitFor(t, "200", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://"+dnsAddr+":8181/ready")
	return l
}

// update writes a version of the Corefile as the kubelet writes a ConfigMap
// volume: a new ..<timestamp> directory, and ..data swapped to it by rename.
func (l *corefileLab) update(t *testing.T, corefile string) {
	t.Helper()
	l.version++
	v := fmt.Sprintf("..2026_12_07_00_00_%02d.%d", l.version, l.version)
	if err := os.MkdirAll(filepath.Join(l.dir, v), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(l.dir, v, "Corefile"), []byte(corefile), 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(l.dir, "..data_tmp")
	if err := os.Symlink(v, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(l.dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// waitFor runs a command in the client namespace until its output contains
// want (30s at most).
func (l *corefileLab) waitFor(t *testing.T, want string, args ...string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _ := l.client.Command(context.Background(), args[0], args[1:]...).CombinedOutput()
		if strings.Contains(string(out), want) {
			return string(out)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q never contained %q; last:\n%s\nclusterdns log:\n%s", strings.Join(args, " "), want, out, l.logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestDigKubeadmCorefile starts clusterdns as kubeadm's coredns Deployment
// starts CoreDNS, -conf with kubeadm's default Corefile, and asks it the
// DNS conformance tests' names with dig, and the libc resolver with a pod's
// search path; /health and /ready on kubeadm's probe ports, /metrics on
// 9153.
func TestDigKubeadmCorefile(t *testing.T) {
	l := newCorefileLab(t, kubeadmCorefileText(t))

	for _, tt := range []struct {
		args []string
		want []string // dig +short's lines, in any order
	}{
		{[]string{"kubernetes.default.svc.cluster.local"}, []string{"198.18.0.1"}},
		{[]string{"dns-test-service.dns-8211.svc.cluster.local"}, []string{"198.18.0.30"}},
		{[]string{"dns-test-service.dns-8211.svc.cluster.local", "AAAA"}, []string{"2001:db8:18::30"}},
		{[]string{"+tcp", "dns-test-service.dns-8211.svc.cluster.local"}, []string{"198.18.0.30"}},
		{[]string{"_http._tcp.dns-test-service.dns-8211.svc.cluster.local", "SRV"}, []string{"0 100 80 dns-test-service.dns-8211.svc.cluster.local."}},
		{[]string{"dns-querier-2.dns-test-service-2.dns-8211.svc.cluster.local"}, []string{"198.19.2.11"}},
		{[]string{"_http._tcp.dns-test-service-2.dns-8211.svc.cluster.local", "SRV"}, []string{"0 100 80 dns-querier-2.dns-test-service-2.dns-8211.svc.cluster.local."}},
		{[]string{"198-19-2-11.dns-8211.pod.cluster.local"}, []string{"198.19.2.11"}},
		{[]string{"-x", "198.18.0.30"}, []string{"dns-test-service.dns-8211.svc.cluster.local."}},
		{[]string{"-x", "2001:db8:18::30"}, []string{"dns-test-service.dns-8211.svc.cluster.local."}},
		{[]string{"-x", "198.19.2.10"}, []string{"198-19-2-10.dns-test-service.dns-8211.svc.cluster.local."}},
		{[]string{"-x", "198.19.2.11"}, []string{"dns-querier-2.dns-test-service-2.dns-8211.svc.cluster.local."}},
		{[]string{"upstream.test"}, []string{"192.0.2.7"}}, // forward . /etc/resolv.conf: the node's dnsmasq
		{[]string{"dns-version.cluster.local", "TXT"}, []string{`"1.1.0"`}},
	} {
		args := append([]string{"@" + dnsAddr, "+short"}, tt.args...)
		out := l.client.Run(t, "dig", args...)
		if lines := strings.Split(strings.TrimSpace(out), "\n"); !sameSet(lines, tt.want) {
			t.Errorf("dig %s: %q, want %q", strings.Join(tt.args, " "), lines, tt.want)
		}
	}
	for _, tt := range []struct{ args, status string }{
		{"nope.dns-8211.svc.cluster.local", "NXDOMAIN"},
		{"dns-test-service.no-such-namespace.svc.cluster.local", "NXDOMAIN"},
		{"dns-8211.svc.cluster.local", "NOERROR"}, // the namespace exists: NODATA
		{"-x 192.0.2.200", "NXDOMAIN"},            // fallthrough in-addr.arpa: dnsmasq's answer
	} {
		out := l.client.Run(t, "dig", append([]string{"@" + dnsAddr}, strings.Fields(tt.args)...)...)
		if !strings.Contains(out, "status: "+tt.status) {
			t.Errorf("dig %s: want %s:\n%s", tt.args, tt.status, out)
		}
	}
	// The libc resolver of a pod in dns-8211, through its search path, as
	// the conformance tests' probers ask.
	for name, want := range map[string]string{
		"kubernetes.default":               "198.18.0.1",
		"kubernetes.default.svc":           "198.18.0.1",
		"dns-test-service":                 "198.18.0.30",
		"dns-querier-2.dns-test-service-2": "198.19.2.11",
	} {
		if out := l.client.Run(t, "getent", "ahostsv4", name); !strings.Contains(out, want) {
			t.Errorf("getent ahostsv4 %s: %q, want %s", name, out, want)
		}
	}
	if out := l.client.Run(t, "curl", "-s", "http://"+dnsAddr+":8080/health"); out != "OK" {
		t.Errorf("/health: %q", out)
	}
	metrics := l.client.Run(t, "curl", "-s", "http://"+dnsAddr+":9153/metrics")
	for _, want := range []string{`coredns_dns_requests_total{family="1",proto="udp",server="dns://:53",type="A",view="",zone="."}`,
		`coredns_plugin_enabled{name="kubernetes",server="dns://:53",view="",zone="."} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestDigReload edits the Corefile as the kubelet updates the coredns
// ConfigMap's volume: clusterdns takes the new one without a restart; a
// Corefile with a plugin it does not implement is refused by name and the
// last good one answers on.
func TestDigReload(t *testing.T) {
	good := kubeadmCorefileText(t)
	l := newCorefileLab(t, good)
	// ttl is the TTL of kubernetes.default's A record, as dig shows it.
	ttl := func() string {
		out := l.waitFor(t, "198.18.0.1", "dig", "@"+dnsAddr, "+noall", "+answer", "kubernetes.default.svc.cluster.local")
		if f := strings.Fields(out); len(f) == 5 {
			return f[1]
		}
		t.Fatalf("dig's answer: %q", out)
		return ""
	}
	if got := ttl(); got != "30" {
		t.Fatalf("ttl %s, want kubeadm's 30", got)
	}
	l.update(t, strings.Replace(good, "ttl 30", "ttl 12", 1))
	deadline := time.Now().Add(30 * time.Second)
	for ttl() != "12" {
		if time.Now().After(deadline) {
			t.Fatalf("the edited Corefile (ttl 12) was not taken within 30s:\n%s", l.logs)
		}
		time.Sleep(100 * time.Millisecond)
	}

	l.update(t, strings.Replace(good, "    loadbalance\n", "    loadbalance\n    rewrite name foo.example kubernetes.default.svc.cluster.local\n", 1))
	deadline = time.Now().Add(30 * time.Second)
	for !strings.Contains(l.logs.String(), "plugin rewrite: clusterdns does not implement it") {
		if time.Now().After(deadline) {
			t.Fatalf("the broken Corefile was not refused by name:\n%s", l.logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := ttl(); got != "12" {
		t.Errorf("after a refused Corefile: ttl %s, want the last good one's 12", got)
	}
	if m := l.client.Run(t, "curl", "-s", "http://"+dnsAddr+":9153/metrics"); !strings.Contains(m, "coredns_reload_failed_total 1") {
		t.Errorf("coredns_reload_failed_total is not 1")
	}
}

// TestCorefileUnknownPlugin: clusterdns refuses to start on a Corefile with
// a plugin it lacks, and says which, where, and what to remove.
func TestCorefileUnknownPlugin(t *testing.T) {
	netnstest.RequireRoot(t, "go")
	bin := filepath.Join(testbin.Build(t, "./cmd/clusterdns"), "clusterdns")
	path := filepath.Join(t.TempDir(), "Corefile")
	bad := strings.Replace(kubeadmCorefileText(t), "    loop\n", "    loop\n    whoami\n", 1)
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "-conf", path).CombinedOutput()
	if err == nil {
		t.Fatalf("clusterdns started:\n%s", out)
	}
	want := path + `:21: plugin whoami: clusterdns does not implement it; remove the line "whoami"`
	if !strings.Contains(string(out), want) {
		t.Errorf("output:\n%s\nwant it to contain %q", out, want)
	}
}
