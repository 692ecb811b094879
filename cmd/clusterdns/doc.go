// Command clusterdns is svcproxy's cluster DNS server: it answers
// <service>.<namespace>.svc.cluster.local from the Services of a manifests file
// (--services) or an API server (--kubeconfig, or the in-cluster config), and
// forwards every other name to the upstreams (--upstream, by default the
// nameservers of /etc/resolv.conf).
//
//	clusterdns --services lab.yaml --listen 127.0.0.1:1053 --upstream 192.0.2.53
//	dig @127.0.0.1 -p 1053 web.default.svc.cluster.local
//
// It serves /metrics and /healthz on --metrics-bind-address, and on SIGTERM or
// SIGINT stops reading and answers the queries in flight before it exits.
package main
