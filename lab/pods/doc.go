// Package pods is what runs in the lab's pods, and the traffic sent to
// them.
//
// Each pod runs a Pod server (the svclab binary itself, as `svclab pod`),
// which answers every HTTP request and UDP datagram with its own name and
// the address the client came from: the one fact a student needs to see
// which pod a Service chose and whether the proxy kept the client's address
// (Answer). A Probe sends that traffic from inside a lab host (`svclab
// probe`, run in the client's namespace so that it resolves names with the
// client's resolv.conf) and writes one Event per request; a Tally turns the
// answers into a table and a bar chart, and a Timeline counts them per
// second by the path that carried them, userspace or the kernel.
//
// A Runner does both in a running lab: it starts a pod's server in the
// pod's namespace and cgroup (StartServer), kills and restarts it as a
// crashed container would be (Kill, Restart), and runs the probe in a lab
// host for `svclab traffic` (Traffic).
package pods
