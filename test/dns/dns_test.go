// Package dns_test runs the clusterdns binary in a network namespace and asks
// it questions with real clients: dig over UDP and TCP, and the libc resolver
// (getent) with a pod's resolv.conf; names outside the zone go to Debian's
// dnsmasq on the namespace's loopback.
package dns_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/testbin"
)

// manifests are the Services of the test, as a user would write them.
const manifests = `
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  clusterIP: 198.18.0.10
  ports: [{name: http, port: 80, protocol: TCP}]
---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: default}
spec:
  clusterIP: None
  ports: [{name: pg, port: 5432, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: db-1
  namespace: default
  labels: {kubernetes.io/service-name: db}
addressType: IPv4
ports: [{name: pg, port: 5432, protocol: TCP}]
endpoints:
- addresses: [198.19.0.1]
  hostname: db-0
  conditions: {ready: true}
- addresses: [198.19.0.2]
  hostname: db-1
  conditions: {ready: true}
---
apiVersion: v1
kind: Service
metadata: {name: ext, namespace: default}
spec: {type: ExternalName, externalName: upstream.test}
---
apiVersion: v1
kind: Service
metadata: {name: abs, namespace: default}
spec: {type: ExternalName, externalName: web.default.svc.cluster.local.}
---
apiVersion: v1
kind: Service
metadata: {name: dual, namespace: default}
spec:
  clusterIP: 198.18.0.20
  clusterIPs: [198.18.0.20, "2001:db8:18::20"]
  ipFamilies: [IPv4, IPv6]
  ports: [{name: http, port: 80, protocol: TCP}]
---
apiVersion: v1
kind: Service
metadata: {name: anon, namespace: default}
spec:
  clusterIP: None
  ports: [{name: http, port: 8080, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: anon-v4
  namespace: default
  labels: {kubernetes.io/service-name: anon}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- addresses: [198.19.2.1]
  conditions: {ready: true}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: anon-v6
  namespace: default
  labels: {kubernetes.io/service-name: anon}
addressType: IPv6
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- addresses: ["2001:db8:19::2:1"]
  conditions: {ready: true}
- addresses: ["2001:db8:19::2:2"]
  hostname: anon-1
  conditions: {ready: true}
- addresses: ["2001:db8:19::2:3"]
  conditions: {ready: false}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: anon-v4-1
  namespace: default
  labels: {kubernetes.io/service-name: anon}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- addresses: [198.19.2.2]
  hostname: anon-1
  conditions: {ready: true}
---
apiVersion: v1
kind: Service
metadata: {name: idle, namespace: default}
spec:
  clusterIP: None
  ports: [{name: http, port: 80, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: idle-1
  namespace: default
  labels: {kubernetes.io/service-name: idle}
addressType: IPv4
ports: [{name: http, port: 80, protocol: TCP}]
endpoints:
- addresses: [198.19.3.1]
  hostname: idle-0
  conditions: {ready: false}
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: kube-system}
spec:
  clusterIP: 198.18.0.1
  ports: [{name: https, port: 443, protocol: TCP}]
`

// bigService is a headless Service whose A answer (100 records) does not fit
// in 512 bytes.
func bigService() string {
	var b strings.Builder
	b.WriteString(`
---
apiVersion: v1
kind: Service
metadata: {name: big, namespace: default}
spec:
  clusterIP: None
  ports: [{name: http, port: 80, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: big-1
  namespace: default
  labels: {kubernetes.io/service-name: big}
addressType: IPv4
ports: [{name: http, port: 80, protocol: TCP}]
endpoints:
`)
	for i := range 100 {
		fmt.Fprintf(&b, "- addresses: [198.19.1.%d]\n", i+1)
	}
	return b.String()
}

// podResolvConf is what the kubelet writes into a pod in namespace default.
const podResolvConf = `nameserver 127.0.0.1
search default.svc.cluster.local svc.cluster.local cluster.local
options ndots:5 timeout:2 attempts:2
`

// lab is a namespace with dnsmasq (upstream.test -> 192.0.2.7, other .test names
// NXDOMAIN) on
// 127.0.0.1:5353, clusterdns on :53 reading file, and a pod's resolv.conf.
type lab struct {
	ns   *netnstest.NS
	file string
	logs *logBuffer
}

// logBuffer collects a process's output while the test reads it.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// newLab starts the lab; clusterdns forwards to upstream, or when it is "", to
// the nameservers of the namespace's resolv.conf (itself).
func newLab(t *testing.T, upstream string, clusterdnsArgs ...string) *lab {
	t.Helper()
	netnstest.RequireRoot(t, "dig", "getent", "dnsmasq", "curl", "go")
	bin := filepath.Join(testbin.Build(t, "./cmd/clusterdns"), "clusterdns")
	ns := netnstest.New(t)
	l := &lab{ns: ns, file: filepath.Join(t.TempDir(), "services.yaml"), logs: &logBuffer{}}
	ns.ResolvConf(t, podResolvConf)
	if err := os.WriteFile(l.file, []byte(manifests+bigService()), 0o644); err != nil {
		t.Fatal(err)
	}

	ns.Start(t, "dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts",
		"--pid-file=", "--user=root", "--listen-address=127.0.0.1", "--bind-interfaces", "--port=5353",
		"--address=/upstream.test/192.0.2.7", "--local=/test/")
	l.waitFor(t, "dnsmasq", "192.0.2.7", "dig", "@127.0.0.1", "-p", "5353", "+short", "upstream.test")

	args := []string{"--services", l.file, "--listen", ":53", "--metrics-bind-address", "127.0.0.1:9153", "-v", "debug"}
	if upstream != "" {
		args = append(args, "--upstream", upstream)
	}
	args = append(args, clusterdnsArgs...)
	cmd := ns.Command(context.Background(), bin, args...)
	cmd.Stdout, cmd.Stderr = l.logs, l.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// SIGTERM: clusterdns shuts down gracefully and exits 0.
		_ = cmd.Process.Signal(os.Interrupt)
		if err := cmd.Wait(); err != nil {
			t.Errorf("clusterdns exit: %v\n%s", err, l.logs)
		}
		if t.Failed() {
			t.Logf("clusterdns log:\n%s", l.logs)
		}
	})
	// Ready once the first Snapshot is indexed: before, the zone is SERVFAIL.
	l.waitFor(t, "clusterdns", `"1.1.0"`, "dig", "@127.0.0.1", "+short", "dns-version.cluster.local", "TXT")
	return l
}

// waitFor runs a command in the namespace until its output contains want: the
// readiness signal of a server in another process. It gives up after 20s.
func (l *lab) waitFor(t *testing.T, what, want string, args ...string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, _ := l.ns.Command(context.Background(), args[0], args[1:]...).CombinedOutput()
		if strings.Contains(string(out), want) {
			return string(out)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %q never contained %q; last output:\n%s\nclusterdns log:\n%s", what, strings.Join(args, " "), want, out, l.logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
