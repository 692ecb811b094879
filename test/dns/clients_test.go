package dns_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/internal/testbin"
)

func TestMain(m *testing.M) { os.Exit(testbin.Main(m)) }

func TestDig(t *testing.T) {
	l := newLab(t, "127.0.0.1:5353")
	tests := []struct {
		name string
		args []string
		want []string // lines of dig +short, in any order; or substrings with +noall
	}{
		{name: "A over UDP", args: []string{"+short", "web.default.svc.cluster.local"}, want: []string{"198.18.0.10"}},
		{name: "A over TCP", args: []string{"+tcp", "+short", "web.default.svc.cluster.local"}, want: []string{"198.18.0.10"}},
		{name: "mixed case", args: []string{"+short", "WEB.Default.Svc.Cluster.Local"}, want: []string{"198.18.0.10"}},
		{name: "SRV", args: []string{"+short", "_https._tcp.api.kube-system.svc.cluster.local", "SRV"},
			want: []string{"0 100 443 api.kube-system.svc.cluster.local."}},
		{name: "PTR", args: []string{"+short", "-x", "198.18.0.10"}, want: []string{"web.default.svc.cluster.local."}},
		{name: "headless", args: []string{"+short", "db.default.svc.cluster.local"}, want: []string{"198.19.0.1", "198.19.0.2"}},
		{name: "headless hostname over TCP", args: []string{"+tcp", "+short", "db-1.db.default.svc.cluster.local"}, want: []string{"198.19.0.2"}},
		{name: "headless SRV", args: []string{"+short", "_pg._tcp.db.default.svc.cluster.local", "SRV"},
			want: []string{"0 50 5432 db-0.db.default.svc.cluster.local.", "0 50 5432 db-1.db.default.svc.cluster.local."}},
		{name: "ExternalName, chased upstream", args: []string{"+short", "ext.default.svc.cluster.local"},
			want: []string{"upstream.test.", "192.0.2.7"}},
		// The DNS specification's rows, and what kubeadm's Corefile adds.
		{name: "ExternalName with a trailing dot, chased in the zone", args: []string{"+short", "abs.default.svc.cluster.local"},
			want: []string{"web.default.svc.cluster.local.", "198.18.0.10"}},
		{name: "no hostname: dashed IPv4 name", args: []string{"+short", "198-19-2-1.anon.default.svc.cluster.local"}, want: []string{"198.19.2.1"}},
		{name: "no hostname: dashed IPv6 name", args: []string{"+short", "2001-db8-19--2-1.anon.default.svc.cluster.local", "AAAA"},
			want: []string{"2001:db8:19::2:1"}},
		{name: "dashed name PTR over ip6.arpa", args: []string{"+short", "-x", "2001:db8:19::2:1"},
			want: []string{"2001-db8-19--2-1.anon.default.svc.cluster.local."}},
		{name: "dual-stack pod: one SRV target", args: []string{"+short", "_http._tcp.anon.default.svc.cluster.local", "SRV"},
			want: []string{"0 33 8080 198-19-2-1.anon.default.svc.cluster.local.", "0 33 8080 anon-1.anon.default.svc.cluster.local.",
				"0 33 8080 2001-db8-19--2-1.anon.default.svc.cluster.local."}},
		{name: "SRV at the bare service name", args: []string{"+short", "web.default.svc.cluster.local", "SRV"},
			want: []string{"0 100 80 web.default.svc.cluster.local."}},
		{name: "AAAA of a dual-stack ClusterIP", args: []string{"+short", "dual.default.svc.cluster.local", "AAAA"}, want: []string{"2001:db8:18::20"}},
		{name: "ClusterIP PTR over ip6.arpa", args: []string{"+short", "-x", "2001:db8:18::20"}, want: []string{"dual.default.svc.cluster.local."}},
		{name: "zone apex NS", args: []string{"+short", "cluster.local", "NS"}, want: []string{"ns.dns.cluster.local."}},
		{name: "the name server's address", args: []string{"+short", "ns.dns.cluster.local"}, want: []string{"127.0.0.1"}},
		{name: "pods insecure", args: []string{"+short", "198-19-0-7.default.pod.cluster.local"}, want: []string{"198.19.0.7"}},
		{name: "pods insecure, IPv6", args: []string{"+short", "2001-db8-19--7.default.pod.cluster.local", "AAAA"}, want: []string{"2001:db8:19::7"}},
		{name: "forwarded to dnsmasq", args: []string{"+short", "upstream.test"}, want: []string{"192.0.2.7"}},
		{name: "forwarded over TCP", args: []string{"+tcp", "+short", "upstream.test"}, want: []string{"192.0.2.7"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := l.ns.Run(t, "dig", append([]string{"@127.0.0.1"}, tt.args...)...)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if !sameSet(lines, tt.want) {
				t.Errorf("dig %s:\n%s\nwant %q", strings.Join(tt.args, " "), out, tt.want)
			}
		})
	}
}

func TestDigStatus(t *testing.T) {
	l := newLab(t, "127.0.0.1:5353")
	tests := []struct {
		name   string
		args   []string
		status string
		flags  string // flags that must be set
		count  string // ANSWER count
	}{
		{name: "NXDOMAIN", args: []string{"nope.default.svc.cluster.local"}, status: "NXDOMAIN", flags: "aa", count: "ANSWER: 0, AUTHORITY: 1"},
		{name: "NODATA", args: []string{"web.default.svc.cluster.local", "AAAA"}, status: "NOERROR", flags: "aa", count: "ANSWER: 0, AUTHORITY: 1"},
		{name: "UDP answer too big: TC", args: []string{"+noedns", "+ignore", "big.default.svc.cluster.local"}, status: "NOERROR", flags: "tc"},
		{name: "dig retries the TC answer over TCP", args: []string{"+noedns", "big.default.svc.cluster.local"}, status: "NOERROR", count: "ANSWER: 100,"},
		{name: "EDNS0 4096 fits", args: []string{"+bufsize=4096", "big.default.svc.cluster.local"}, status: "NOERROR", count: "ANSWER: 100,"},
		{name: "forwarded NXDOMAIN", args: []string{"nope.test"}, status: "NXDOMAIN"},
		{name: "headless without ready endpoints: NXDOMAIN", args: []string{"idle.default.svc.cluster.local"}, status: "NXDOMAIN", flags: "aa"},
		{name: "not-ready endpoint has no dashed name", args: []string{"2001-db8-19--2-3.anon.default.svc.cluster.local", "AAAA"}, status: "NXDOMAIN"},
		{name: "NS answer carries the server's address", args: []string{"cluster.local", "NS"}, status: "NOERROR", count: "ANSWER: 1, AUTHORITY: 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := l.ns.Run(t, "dig", append([]string{"@127.0.0.1"}, tt.args...)...)
			if !strings.Contains(out, "status: "+tt.status) || !strings.Contains(out, tt.count) {
				t.Errorf("want status %s and %q:\n%s", tt.status, tt.count, out)
			}
			if tt.flags != "" && !regexp.MustCompile(`flags:[a-z ]* `+tt.flags+`[ ;]`).MatchString(out) {
				t.Errorf("want flag %s:\n%s", tt.flags, out)
			}
		})
	}
}

// TestLibcResolver resolves names as a program in a pod does: getent through
// glibc's stub resolver, with the search path and ndots:5 of a pod.
func TestLibcResolver(t *testing.T) {
	l := newLab(t, "127.0.0.1:5353")
	tests := []struct {
		name, want string
	}{
		{name: "web", want: "198.18.0.10     web.default.svc.cluster.local"},
		{name: "web.default", want: "198.18.0.10     web.default.svc.cluster.local"},
		{name: "api.kube-system", want: "198.18.0.1      api.kube-system.svc.cluster.local"},
		{name: "db-0.db", want: "198.19.0.1      db-0.db.default.svc.cluster.local"},
		{name: "web.default.svc.cluster.local.", want: "198.18.0.10     web.default.svc.cluster.local"},
		// Through the search list (NXDOMAIN each time), then upstream.
		{name: "upstream.test", want: "192.0.2.7       upstream.test"},
		{name: "198-19-2-1.anon", want: "198.19.2.1      198-19-2-1.anon.default.svc.cluster.local"},
		{name: "198-19-0-7.default.pod", want: "198.19.0.7      198-19-0-7.default.pod.cluster.local"},
		{name: "dual.default", want: "2001:db8:18::20 dual.default.svc.cluster.local"},
		// ExternalName: glibc does not chase CNAMEs, clusterdns did.
		{name: "ext", want: "192.0.2.7       upstream.test ext.default.svc.cluster.local"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := strings.TrimSpace(l.ns.Run(t, "getent", "hosts", tt.name))
			if got != tt.want {
				t.Errorf("getent hosts %s = %q, want %q", tt.name, got, tt.want)
			}
		})
	}
	if out, err := l.ns.Command(t.Context(), "getent", "hosts", "nope").CombinedOutput(); err == nil {
		t.Errorf("getent hosts nope succeeded: %s", out)
	}
}

// TestServiceAdded: a Service written into the manifests file resolves within
// seconds, without a restart.
func TestServiceAdded(t *testing.T) {
	l := newLab(t, "127.0.0.1:5353")
	if out := l.ns.Run(t, "dig", "@127.0.0.1", "late.default.svc.cluster.local"); !strings.Contains(out, "NXDOMAIN") {
		t.Fatalf("late exists before it was added:\n%s", out)
	}
	late := `
---
apiVersion: v1
kind: Service
metadata: {name: late, namespace: default}
spec:
  clusterIP: 198.18.0.99
  ports: [{port: 80}]
`
	f, err := os.OpenFile(l.file, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(late); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	l.waitFor(t, "new service", "198.18.0.99", "getent", "hosts", "late")
}

// TestLoop: without --upstream, clusterdns takes the namespace's resolv.conf,
// which names 127.0.0.1: itself. It must see that and refuse to forward, not
// send its queries round in a circle.
func TestLoop(t *testing.T) {
	l := newLab(t, "", "--upstream-timeout", "1s")
	out := l.ns.Run(t, "dig", "@127.0.0.1", "+tries=1", "+time=4", "upstream.test")
	if !strings.Contains(out, "status: SERVFAIL") {
		t.Errorf("want SERVFAIL with no usable upstream:\n%s", out)
	}
	if !strings.Contains(l.logs.String(), "not forwarding to it") {
		t.Errorf("no loop reported in the log:\n%s", l.logs)
	}
	// The zone still works.
	l.waitFor(t, "zone", "198.18.0.10", "dig", "@127.0.0.1", "+short", "web.default.svc.cluster.local")
}

// TestClusterOnly: a resolv.conf without nameservers makes a server of the
// cluster's names alone: other names are REFUSED at once, /healthz is 200
// (nothing is broken), and the log says why nothing is forwarded.
func TestClusterOnly(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(empty, []byte("search cluster.local\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l := newLab(t, "", "--resolv-conf", empty)
	out := l.ns.Run(t, "dig", "@127.0.0.1", "+tries=1", "+time=4", "upstream.test")
	if !strings.Contains(out, "status: REFUSED") {
		t.Errorf("want REFUSED without upstreams:\n%s", out)
	}
	l.waitFor(t, "/healthz", "ok", "curl", "-s", "http://127.0.0.1:9153/healthz")
	if !strings.Contains(l.logs.String(), "it lists no nameserver") {
		t.Errorf("no line in the log says why nothing is forwarded:\n%s", l.logs)
	}
}

// sameSet reports whether got and want hold the same lines, in any order.
func sameSet(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	seen := make(map[string]int)
	for _, g := range got {
		seen[strings.TrimSpace(g)]++
	}
	for _, w := range want {
		if seen[w] == 0 {
			return false
		}
		seen[w]--
	}
	return true
}
