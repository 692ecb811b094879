package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// kubeadmCorefile is kubeadm v1.37.2's default Corefile (see
// dnsresolve/corefile/testdata) with what a test on loopback must change:
// the ports, bind, the upstream instead of /etc/resolv.conf, a reload
// interval of 2s (CoreDNS's least) instead of 30s, and lameduck 1s.
func kubeadmCorefile(t *testing.T, p ports, upstream string) string {
	t.Helper()
	b, err := os.ReadFile("../../dnsresolve/corefile/testdata/kubeadm-v1.37.2.Corefile")
	if err != nil {
		t.Fatal(err)
	}
	r := strings.NewReplacer(
		".:53 {", fmt.Sprintf(".:%d {\n    bind 127.0.0.1", p.dns),
		"lameduck 5s", "lameduck 1s",
		"    ready\n", fmt.Sprintf("    ready 127.0.0.1:%d\n", p.ready),
		"    health {", fmt.Sprintf("    health 127.0.0.1:%d {", p.health),
		"prometheus :9153", fmt.Sprintf("prometheus 127.0.0.1:%d", p.metrics),
		"forward . /etc/resolv.conf", "forward . "+upstream,
		"    reload\n", "    reload 2s\n",
	)
	return r.Replace(string(b))
}

// ports are a test's loopback ports: DNS (UDP and TCP) and the three HTTP
// servers.
type ports struct{ dns, health, ready, metrics int }

func freePorts(t *testing.T) ports {
	t.Helper()
	var p [4]int
	for i := range p {
		pc, ln, err := listenBoth()
		if err != nil {
			t.Fatal(err)
		}
		p[i] = pc.LocalAddr().(*net.UDPAddr).Port
		pc.Close()
		ln.Close()
	}
	return ports{p[0], p[1], p[2], p[3]}
}

// listenBoth finds a port free for UDP and TCP both.
func listenBoth() (net.PacketConn, net.Listener, error) {
	for range 10 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return nil, nil, err
		}
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, ln, nil
		}
		pc.Close()
	}
	return nil, nil, fmt.Errorf("no port free for UDP and TCP")
}

// fakeResolver answers *.example.: upstream.example A 192.0.2.7, anything
// else NXDOMAIN. It stands for the node's resolvers.
func fakeResolver(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg).SetReply(req)
		if q := req.Question[0]; strings.EqualFold(q.Name, "upstream.example.") && q.Qtype == dns.TypeA {
			rr, _ := dns.NewRR("upstream.example. 60 IN A 192.0.2.7")
			m.Answer = []dns.RR{rr}
		} else {
			m.Rcode = dns.RcodeNameError
			soa, _ := dns.NewRR("example. 60 IN SOA ns.example. h.example. 1 2 3 4 60")
			m.Ns = []dns.RR{soa}
		}
		_ = w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = srv.Shutdown(); <-done })
	return pc.LocalAddr().String()
}

// writeServices writes testServices to services.yaml in dir, for
// --services, and returns its path.
func writeServices(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "services.yaml")
	if err := os.WriteFile(path, []byte(testServices), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

const testServices = `
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  clusterIP: 198.18.0.10
  ports: [{name: http, port: 80, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: default, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- {addresses: [198.19.0.5], hostname: web-0}
`

// configMapDir lays out a Corefile as a ConfigMap volume holds it:
// Corefile -> ..data/Corefile, ..data -> ..<version>; update swaps ..data
// as the kubelet's atomic writer does (a new directory, a symlink renamed
// over the old one).
type configMapDir struct {
	dir string
	n   int
}

func newConfigMapDir(t *testing.T, corefile string) *configMapDir {
	t.Helper()
	c := &configMapDir{dir: t.TempDir()}
	c.update(t, corefile)
	if err := os.Symlink(filepath.Join("..data", "Corefile"), filepath.Join(c.dir, "Corefile")); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *configMapDir) path() string { return filepath.Join(c.dir, "Corefile") }

func (c *configMapDir) update(t *testing.T, corefile string) {
	t.Helper()
	c.n++
	version := fmt.Sprintf("..2026_12_07_00_00_%02d.%d", c.n, c.n)
	if err := os.Mkdir(filepath.Join(c.dir, version), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.dir, version, "Corefile"), []byte(corefile), 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(c.dir, "..data_tmp")
	if err := os.Symlink(version, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(c.dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a log the test reads while clusterdns writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// daemonRun is clusterdns -conf running in the test's process.
type daemonRun struct {
	p    ports
	logs *syncBuffer
}

// startCorefile runs runCorefile on the Corefile at path until the test
// ends, and waits until /ready says 200.
func startCorefile(t *testing.T, p ports, path string, flags ...string) *daemonRun {
	t.Helper()
	cfg, err := parseFlags(append([]string{"-conf", path}, flags...))
	if err != nil {
		t.Fatal(err)
	}
	d := &daemonRun{p: p, logs: &syncBuffer{}}
	log := slog.New(slog.NewTextHandler(d.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runCorefile(ctx, cfg, log) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runCorefile: %v", err)
		}
		if t.Failed() {
			t.Logf("clusterdns log:\n%s", d.logs)
		}
	})
	d.waitHTTP(t, p.ready, "/ready", "OK")
	return d
}

// waitHTTP polls a loopback URL until its body is want (20s at most).
func (d *daemonRun) waitHTTP(t *testing.T, port int, path, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		if body, code, err := get(port, path); err == nil && code == http.StatusOK && body == want {
			return
		} else {
			last = fmt.Sprintf("%d %q %v", code, body, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("GET :%d%s never said %q; last: %s\n%s", port, path, want, last, d.logs)
}

func get(port int, path string) (string, int, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), resp.StatusCode, err
}

// ask sends one question over UDP and returns the answer.
func (d *daemonRun) ask(t *testing.T, name string, qtype uint16) *dns.Msg {
	t.Helper()
	c := &dns.Client{Timeout: 3 * time.Second}
	resp, _, err := c.Exchange(new(dns.Msg).SetQuestion(name, qtype), fmt.Sprintf("127.0.0.1:%d", d.p.dns))
	if err != nil {
		t.Fatalf("%s %s: %v", name, dns.TypeToString[qtype], err)
	}
	return resp
}

// TestKubeadmCorefile serves kubeadm's Corefile: the Services' names with
// its ttl 30, a pod name (pods insecure), PTR of a ClusterIP and of an
// endpoint, a reverse name of nothing forwarded (fallthrough), an outside
// name forwarded; /health and /ready as kubeadm's probes ask them.
func TestKubeadmCorefile(t *testing.T) {
	p := freePorts(t)
	files := t.TempDir()
	services := writeServices(t, files)
	cm := newConfigMapDir(t, kubeadmCorefile(t, p, fakeResolver(t)))
	d := startCorefile(t, p, cm.path(), "--services", services)

	for _, tt := range []struct {
		name  string
		qtype uint16
		rcode int
		want  string // the first answer, in zone-file syntax ("" none)
	}{
		{"web.default.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, "web.default.svc.cluster.local. 30 IN A 198.18.0.10"},
		{"_http._tcp.web.default.svc.cluster.local.", dns.TypeSRV, dns.RcodeSuccess, "_http._tcp.web.default.svc.cluster.local. 30 IN SRV 0 100 80 web.default.svc.cluster.local."},
		{"web-0.web.default.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, "web-0.web.default.svc.cluster.local. 30 IN A 198.19.0.5"},
		{"198-19-0-9.default.pod.cluster.local.", dns.TypeA, dns.RcodeSuccess, "198-19-0-9.default.pod.cluster.local. 30 IN A 198.19.0.9"},
		{"10.0.18.198.in-addr.arpa.", dns.TypePTR, dns.RcodeSuccess, "10.0.18.198.in-addr.arpa. 30 IN PTR web.default.svc.cluster.local."},
		{"5.0.19.198.in-addr.arpa.", dns.TypePTR, dns.RcodeSuccess, "5.0.19.198.in-addr.arpa. 30 IN PTR web-0.web.default.svc.cluster.local."},
		{"nope.default.svc.cluster.local.", dns.TypeA, dns.RcodeNameError, ""},
		{"nope.nowhere.svc.cluster.local.", dns.TypeA, dns.RcodeNameError, ""},
		// fallthrough in-addr.arpa: the fake resolver's NXDOMAIN, with its SOA.
		{"1.2.0.192.in-addr.arpa.", dns.TypePTR, dns.RcodeNameError, ""},
		{"upstream.example.", dns.TypeA, dns.RcodeSuccess, "upstream.example. 30 IN A 192.0.2.7"}, // cache 30 caps 60
	} {
		resp := d.ask(t, tt.name, tt.qtype)
		if resp.Rcode != tt.rcode {
			t.Errorf("%s %s: %s, want %s", tt.name, dns.TypeToString[tt.qtype], dns.RcodeToString[resp.Rcode], dns.RcodeToString[tt.rcode])
			continue
		}
		if tt.want == "" {
			if len(resp.Answer) > 0 {
				t.Errorf("%s: answers %v", tt.name, resp.Answer)
			}
			continue
		}
		want, _ := dns.NewRR(tt.want)
		if len(resp.Answer) == 0 || resp.Answer[0].String() != want.String() {
			t.Errorf("%s %s: %v, want %s", tt.name, dns.TypeToString[tt.qtype], resp.Answer, want)
		}
	}
	if ns := d.ask(t, "1.2.0.192.in-addr.arpa.", dns.TypePTR).Ns; len(ns) != 1 || ns[0].Header().Name != "example." {
		t.Errorf("a reverse name of nothing: authority %v, want the upstream's (it fell through)", ns)
	}
	if body, code, err := get(p.health, "/health"); err != nil || code != 200 || body != "OK" {
		t.Errorf("/health: %d %q %v", code, body, err)
	}
}

// TestCorefileReload edits the Corefile as the kubelet updates a ConfigMap
// volume: a new ttl is served without a restart; a Corefile with a plugin
// clusterdns lacks is refused with its name and line, counted, and the last
// good one goes on serving; a fixed one is taken again.
func TestCorefileReload(t *testing.T) {
	p := freePorts(t)
	services := writeServices(t, t.TempDir())
	good := kubeadmCorefile(t, p, fakeResolver(t))
	cm := newConfigMapDir(t, good)
	d := startCorefile(t, p, cm.path(), "--services", services)
	ttl := func() uint32 {
		a := d.ask(t, "web.default.svc.cluster.local.", dns.TypeA).Answer
		if len(a) != 1 {
			t.Fatalf("web: %v", a)
		}
		return a[0].Header().Ttl
	}
	if got := ttl(); got != 30 {
		t.Fatalf("ttl %d, want 30", got)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second) // reload 2s, jitter up to ±0.5s
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 15s\n%s", what, d.logs)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	cm.update(t, strings.Replace(good, "ttl 30", "ttl 7", 1))
	waitFor("ttl 7 served", func() bool { return ttl() == 7 })

	broken := strings.Replace(good, "ttl 30", "ttl 9", 1)
	broken = strings.Replace(broken, "    loadbalance\n", "    loadbalance\n    rewrite name web.default.svc.cluster.local db.default.svc.cluster.local\n", 1)
	cm.update(t, broken)
	waitFor("the broken Corefile refused", func() bool {
		return strings.Contains(d.logs.String(), "Corefile changed but reload failed") &&
			strings.Contains(d.logs.String(), "plugin rewrite: clusterdns does not implement it")
	})
	if got := ttl(); got != 7 {
		t.Errorf("after a broken Corefile: ttl %d, want 7 (the last good one)", got)
	}
	metrics, _, _ := get(p.metrics, "/metrics")
	if !strings.Contains(metrics, "coredns_reload_failed_total 1") {
		t.Errorf("coredns_reload_failed_total is not 1:\n%s", grepLines(metrics, "coredns_reload"))
	}

	cm.update(t, strings.Replace(good, "ttl 30", "ttl 11", 1))
	waitFor("ttl 11 served after the fix", func() bool { return ttl() == 11 })
}

// TestCorefileRefused: a Corefile with a plugin or option clusterdns does
// not implement stops it at start, naming the plugin, its line and what to
// remove.
func TestCorefileRefused(t *testing.T) {
	p := freePorts(t)
	bad := strings.Replace(kubeadmCorefile(t, p, "192.0.2.53"), "    loop\n", "    loop\n    hosts {\n        192.0.2.9 extra.example\n    }\n", 1)
	bad = strings.Replace(bad, "pods insecure", "pods insecure\n       endpoint_pod_names", 1)
	path := filepath.Join(t.TempDir(), "Corefile")
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := parseFlags([]string{"-conf", path})
	if err != nil {
		t.Fatal(err)
	}
	err = runCorefile(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		path + `:10: plugin kubernetes: option endpoint_pod_names: clusterdns does not implement it; remove the line "endpoint_pod_names" from the kubernetes block`,
		path + `:23: plugin hosts: clusterdns does not implement it; remove the line "hosts {" and its block { ... }`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error:\n%v\nlacks %q", err, want)
		}
	}
}

func TestFlagsBesideConf(t *testing.T) {
	_, err := parseFlags([]string{"-conf", "Corefile", "--ttl", "30", "--services", "s.yaml"})
	if err == nil || err.Error() != "--ttl and -conf: the Corefile says this (the kubernetes plugin's ttl option); set it there" {
		t.Errorf("err = %v", err)
	}
	if _, err := parseFlags([]string{"-conf", "Corefile", "--kubeconfig", "k", "--advertise-address", "198.18.0.10", "-v", "debug"}); err != nil {
		t.Errorf("flags that the Corefile does not cover: %v", err)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
