package watch_test

import (
	"fmt"

	"github.com/svcproxy/svcproxy/service/watch"
)

// A manifests file may mix kinds; those that are not Services, EndpointSlices
// or Endpoints are named in the error, with their file and line, and the rest
// still loads.
func ExampleLoadManifests() {
	data := []byte(`apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  clusterIP: 198.18.0.10
  ports: [{name: http, port: 80}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
`)
	objs, err := watch.LoadManifests("lab.yaml", data)
	fmt.Println(len(objs), "object loaded")
	fmt.Println(err)
	// Output:
	// 1 object loaded
	// lab.yaml:8: apps/v1 Deployment default/web: unsupported kind (want v1 Service, discovery.k8s.io/v1 EndpointSlice, v1 Endpoints, v1 Node, v1 Namespace or v1 Pod)
}

// SnapshotOf reads a manifests file once: a Service and the EndpointSlice an
// endpoints controller would write for it become a Snapshot, the input of
// every dataplane.
func ExampleSnapshotOf() {
	snap, err := watch.SnapshotOf("web.yaml", []byte(`apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  clusterIP: 198.18.0.20
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints:
- addresses: [198.19.1.10]
- addresses: [198.19.1.11]
  conditions: {ready: false}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, p := range snap.Ports() {
		fmt.Println(p, p.Service.ClusterIPs, "port", p.Port)
		for _, ep := range p.Endpoints {
			fmt.Println("  endpoint", ep, "ready:", ep.Ready)
		}
		fmt.Println("  usable:", p.Categorize("", nil).Cluster)
	}
	// Output:
	// default/web:http [198.18.0.20] port 80
	//   endpoint 198.19.1.10:8080 ready: true
	//   endpoint 198.19.1.11:8080 ready: false
	//   usable: [198.19.1.10:8080]
}
