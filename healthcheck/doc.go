// Package healthcheck serves kube-proxy's service health checks: for each Service
// with externalTrafficPolicy: Local and a spec.healthCheckNodePort, an HTTP server on
// that port of the node, which a cloud load balancer polls to learn whether this node
// has endpoints of the Service.
//
// The answer is kube-proxy's (pkg/proxy/healthcheck/service_health.go): 200 when the
// node has at least one ready local endpoint, 503 when it has none, with a JSON body
// naming the Service and the count, and the X-Load-Balancing-Endpoint-Weight header:
//
//	HTTP/1.1 200 OK
//	Content-Type: application/json
//	X-Load-Balancing-Endpoint-Weight: 2
//
//	{"service":{"namespace":"default","name":"web"},"localEndpoints":2,"serviceProxyHealthy":true}
//
// The Server follows Snapshots: it opens a listener when a Service gains a health
// check port, closes it when the Service loses it, and updates counts in place.
//
// Proxy is the proxy's own health, kube-proxy's ProxyHealthServer (KEP-3836):
// /livez fails only while the rules lag the Snapshots, /healthz also while they
// are not synced and while this node is being deleted or is tainted
// ToBeDeletedByClusterAutoscaler, so that load balancers drain it.
//
// ServeEndpoints runs the proxy's own HTTP servers (healthz on 10256, metrics
// on 10249), and retries an address it cannot listen on as kube-proxy does
// without bindAddressHardFail.
package healthcheck
