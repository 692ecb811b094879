package watch

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// selectYAML holds, each with its endpoints: a plain Service (web), one that
// names another proxy (other, the label with an empty value: any value
// counts), a headless one (db, whose slice the EndpointSlice controller
// labels headless) and a headless one known only by its v1 Endpoints (db2).
const selectYAML = `apiVersion: v1
kind: Service
metadata: {name: web}
spec: {clusterIP: 198.18.0.10, ports: [{name: http, port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
endpoints: [{addresses: [198.19.0.1]}]
ports: [{name: http, port: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: other, labels: {service.kubernetes.io/service-proxy-name: ""}}
spec: {clusterIP: 198.18.0.20, ports: [{name: http, port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: other-1, labels: {kubernetes.io/service-name: other}}
addressType: IPv4
endpoints: [{addresses: [198.19.0.2]}]
ports: [{name: http, port: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: db}
spec: {clusterIP: None, ports: [{name: pg, port: 5432}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: db-1, labels: {kubernetes.io/service-name: db, service.kubernetes.io/headless: ""}}
addressType: IPv4
endpoints: [{addresses: [198.19.0.3]}]
ports: [{name: pg, port: 5432}]
---
apiVersion: v1
kind: Service
metadata: {name: db2}
spec: {clusterIP: None, ports: [{name: pg, port: 5432}]}
---
apiVersion: v1
kind: Endpoints
metadata: {name: db2, labels: {service.kubernetes.io/headless: ""}}
subsets: [{addresses: [{ip: 198.19.0.4}], ports: [{name: pg, port: 5432}]}]
`

// TestBuildProxiedOnly: a manifests file is filtered as kube-proxy's
// informers select, when the Watcher is svcproxy's; clusterdns's sees all.
func TestBuildProxiedOnly(t *testing.T) {
	objs, err := LoadManifests("f.yaml", []byte(selectYAML))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		sel  selection
		want string
	}{
		{"svcproxy: only what a proxy serves", selection{proxiedOnly: true},
			"default/web:http 198.18.0.10:80 -> 198.19.0.1:8080"},
		{"clusterdns: everything", selection{},
			"default/db:pg :5432 -> 198.19.0.3:5432\n" +
				"default/db2:pg :5432 -> 198.19.0.4:5432\n" +
				"default/other:http 198.18.0.20:80 -> 198.19.0.2:8080\n" +
				"default/web:http 198.18.0.10:80 -> 198.19.0.1:8080"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			snap := build(objs, tt.sel)
			if got := describe(snap); got != tt.want {
				t.Errorf("Snapshot:\n%s\nwant:\n%s", got, tt.want)
			}
			if errs := snap.Errors(); len(errs) > 0 {
				t.Errorf("errors: %v", errs)
			}
		})
	}
}

// TestSelectorsAreKubeProxys: the list options the informers send are
// kube-proxy's, to the letter (ProxyServer.Run, v1.37.2), and clusterdns's
// send none.
func TestSelectorsAreKubeProxys(t *testing.T) {
	show := func(o metav1.ListOptions) string {
		return strings.TrimSpace("label=" + o.LabelSelector + " field=" + o.FieldSelector)
	}
	for _, tt := range []struct {
		sel              selection
		services, slices string
	}{
		{selection{proxiedOnly: true},
			"label=!service.kubernetes.io/service-proxy-name field=spec.clusterIP!=None",
			"label=!service.kubernetes.io/headless field="},
		{selection{}, "label= field=", "label= field="},
	} {
		var svc, es metav1.ListOptions
		tt.sel.serviceOptions(&svc)
		tt.sel.sliceOptions(&es)
		if got := show(svc); got != tt.services {
			t.Errorf("proxiedOnly=%t: Services %q, want %q", tt.sel.proxiedOnly, got, tt.services)
		}
		if got := show(es); got != tt.slices {
			t.Errorf("proxiedOnly=%t: EndpointSlices %q, want %q", tt.sel.proxiedOnly, got, tt.slices)
		}
	}
}
