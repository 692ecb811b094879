// Package lab builds a small Kubernetes node out of network namespaces on one
// machine, so that svcproxy and clusterdns can be watched doing their work.
//
// A Plan says what the cluster looks like: a node namespace where svcproxy and
// clusterdns run, a client namespace, and one namespace per pod, each linked to
// the node by a veth pair and routed the way Calico routes pods (a /32 route per
// pod on the node, and on the pod side routes to the Service and pod ranges via
// the node, and nothing else: no route out of the lab). Plan.Commands renders the
// plan as `ip` commands, a pure function; Lab.Up runs them.
//
// Each pod runs this package's Pod server (the svclab binary itself, as
// `svclab pod`), which answers every HTTP request and UDP datagram with its own
// name and the address the client came from: the one fact a student needs to see
// which pod a Service chose and whether the proxy kept the client's address.
// Probe sends that traffic from the client and Tally turns the answers into a
// table and a bar chart.
//
// Lab keeps its state (pid files, logs, the manifests file) under one directory,
// /run/svclab by default, and Down removes every namespace, process, mount and
// file it made. Demo is the narrated walk of `make lab`.
package lab
