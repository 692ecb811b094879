// Package dnsresolve is svcproxy's cluster DNS: it answers
// <service>.<namespace>.svc.<zone> from the same service.Snapshots the proxy
// reads, and forwards every other name to upstream resolvers.
//
// It follows the Kubernetes DNS-Based Service Discovery specification v1.1.0
// (github.com/kubernetes/dns, docs/specification.md) in three layers:
//
//   - Index, a pure lookup layer: built once per Snapshot (no per-query scan,
//     and none for a Snapshot already indexed), it maps a question (name,
//     type) to the records of the specification: A/AAAA, SRV (per named port
//     and at the Service's own name), PTR (in-addr.arpa and ip6.arpa), CNAME
//     for ExternalName, headless endpoints by hostname or dashed address, the
//     dns-version TXT, the zone's SOA and NS, and, as kubeadm's "pods
//     insecure", <a-b-c-d>.<ns>.pod.<zone>.
//   - Forwarder: names outside the zone go to upstreams as CoreDNS's forward
//     plugin sends them: healthy upstreams first (one that fails is marked
//     down and probed in the background), at most MaxConcurrent queries in
//     flight (REFUSED beyond), one exchange per question in flight
//     (singleflight), a cache keyed by name, type, class, DO and CD. A query
//     of ours that comes back is a forwarding loop: that upstream is not used,
//     /healthz fails and the log says so every minute until it is gone.
//   - Server: the github.com/miekg/dns server on UDP and TCP. It swaps in a new
//     Index atomically on every Snapshot, honours EDNS0 buffer sizes, truncates
//     (TC) what does not fit, and serves /metrics (Prometheus client_golang)
//     and /healthz. Most answers, the zone's and the forwarder's cached ones,
//     are kept encoded and written without a dns.Msg: no allocation per
//     question in the handler (wire.go). UDP queries are read into pooled
//     buffers through the server's Reader hook (udp.go): what a query still
//     allocates, eight objects with an OPT record, is miekg/dns's own.
package dnsresolve
