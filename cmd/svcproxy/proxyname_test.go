package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/offloadtest"
)

// TestServiceProxyNameKernel runs svcproxy (the test binary, as
// TestIPVSFallback does) in iptables mode on the real kernel, in the node
// namespace of offloadtest's lab, on a manifests file with two Services over
// the same three backends: web, and other, labelled
// service.kubernetes.io/service-proxy-name for another proxy. A client
// reaches web; other gets no rule at all (iptables-save does not name its
// ClusterIP, /status does not list it) and no answer.
func TestServiceProxyNameKernel(t *testing.T) {
	netnstest.RequireRoot(t, "iptables-restore", "iptables-save")
	l := offloadtest.New(t, "node")
	l.ServeTCP(t, 8080)
	file := filepath.Join(t.TempDir(), "services.yaml")
	if err := os.WriteFile(file, []byte(proxyNameManifests()), 0o644); err != nil {
		t.Fatal(err)
	}
	startServing(t, l.Node, "--mode", "iptables", "--services", file, "--hostname-override", "node")
	waitHealthy(t, l.Node) // its first sync is done

	answers, err := offloadtest.Dial(l.Client, "198.18.0.10:80", 3)
	if err != nil {
		t.Fatalf("web 198.18.0.10:80: %v", err)
	}
	t.Logf("web answered: %v", answers)
	rules := l.Node.Run(t, "iptables-save", "-t", "nat")
	if !strings.Contains(rules, "198.18.0.10/32") {
		t.Errorf("no rule for web's ClusterIP 198.18.0.10:\n%s", rules)
	}
	if strings.Contains(rules, "198.18.0.20") {
		t.Errorf("a rule for other's ClusterIP 198.18.0.20, which is another proxy's:\n%s", rules)
	}
	status, err := getIn(l.Node, "127.0.0.1:10249", "/status")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(status, "default/web") || strings.Contains(status, "default/other") {
		t.Errorf("/status lists web and not other? %s", status)
	}
	if a, err := offloadtest.Dial(l.Client, "198.18.0.20:80", 1); err == nil {
		t.Errorf("other 198.18.0.20:80 answered %v: another proxy's Service was served", a)
	} else {
		t.Logf("other 198.18.0.20:80: %v (no rule, no answer)", err)
	}
}

// proxyNameManifests are web and other (labelled for another proxy), each
// with an EndpointSlice of the lab's three backends on port 8080.
func proxyNameManifests() string {
	var b strings.Builder
	for _, svc := range []struct{ name, ip, labels string }{
		{"web", "198.18.0.10", "{}"},
		{"other", "198.18.0.20", "{service.kubernetes.io/service-proxy-name: other}"},
	} {
		fmt.Fprintf(&b, `apiVersion: v1
kind: Service
metadata: {name: %s, labels: %s}
spec: {clusterIP: %s, ports: [{name: http, port: 80, targetPort: 8080}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: %s-1, labels: {kubernetes.io/service-name: %s}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints:
`, svc.name, svc.labels, svc.ip, svc.name, svc.name)
		for i := range 3 {
			fmt.Fprintf(&b, "- {addresses: [%s], nodeName: node, conditions: {ready: true}}\n", offloadtest.BackendAddr(i))
		}
		b.WriteString("---\n")
	}
	return b.String()
}
