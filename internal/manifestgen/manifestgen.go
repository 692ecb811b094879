// Package manifestgen writes the manifests the benchmarks load: n ClusterIP
// Services spread over 50 namespaces, each with one named port and an
// EndpointSlice of two ready endpoints, as one JSON List (parsed much faster
// than YAML at 20,000 Services). bench/dns serves them to clusterdns and fills
// an API server with them; service/watch's BenchmarkLoadFile loads them.
package manifestgen

import (
	"encoding/json"
	"fmt"
)

// Namespaces is how many namespaces the Services are spread over.
const Namespaces = 50

// Name is the name and namespace of Service i: "svc-00042", "ns-42".
func Name(i int) (name, ns string) {
	return fmt.Sprintf("svc-%05d", i), fmt.Sprintf("ns-%02d", i%Namespaces)
}

// ClusterIP is the ClusterIP of Service i. They count from 198.18.0.2 (the
// API server gives .1 to its own "kubernetes" Service).
func ClusterIP(i int) string {
	return fmt.Sprintf("198.18.%d.%d", (i+2)/256, (i+2)%256)
}

// List is the JSON List of n Services and their EndpointSlices: ClusterIP(i)
// for Service i, endpoints from 198.19.0.0.
func List(n int) ([]byte, error) {
	if n > 65000 {
		return nil, fmt.Errorf("%d services: more than 198.18.0.0/16 holds", n)
	}
	items := make([]any, 0, 2*n)
	for i := range n {
		name, ns := Name(i)
		items = append(items, map[string]any{
			"apiVersion": "v1", "kind": "Service",
			"metadata": map[string]any{"name": name, "namespace": ns},
			"spec": map[string]any{
				"clusterIP": ClusterIP(i),
				"ports":     []any{map[string]any{"name": "http", "port": 80, "protocol": "TCP"}},
			},
		}, map[string]any{
			"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
			"metadata": map[string]any{
				"name": name + "-1", "namespace": ns,
				"labels": map[string]any{"kubernetes.io/service-name": name},
			},
			"addressType": "IPv4",
			"ports":       []any{map[string]any{"name": "http", "port": 8080, "protocol": "TCP"}},
			"endpoints": []any{
				map[string]any{"addresses": []any{fmt.Sprintf("198.19.%d.%d", (2*i)/256%256, (2*i)%256)}, "conditions": map[string]any{"ready": true}},
				map[string]any{"addresses": []any{fmt.Sprintf("198.19.%d.%d", (2*i+1)/256%256, (2*i+1)%256)}, "conditions": map[string]any{"ready": true}},
			},
		})
	}
	return json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
}
