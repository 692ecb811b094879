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
	// lab.yaml:8: apps/v1 Deployment default/web: unsupported kind (want v1 Service, discovery.k8s.io/v1 EndpointSlice or v1 Endpoints)
}
