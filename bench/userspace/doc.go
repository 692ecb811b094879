// Command userspace-bench measures the userspace data path: the same Go load
// generator drives the same backends three ways in one run,
//
//   - direct: straight to the backends;
//   - userspace: to a ClusterIP, REDIRECTed by the portals of a real
//     userspace.Proxier (a child process, as svcproxy runs it) to its listener;
//   - haproxy: to Debian's HAProxy in TCP mode with `option splice-auto`,
//
// and reports connections/s (one short connection each), requests/s (64-byte
// request and reply on keep-alive connections), Gbit/s (bulk streams), and the
// memory each proxy process needs per idle proxied connection.
//
// It needs root: it re-executes itself with `unshare --net` in a private network
// namespace where everything runs on loopback, and installs the portals there
// with iptables-restore; the namespace disappears with the process. Run it with
// `make bench` or:
//
//	go run ./bench/userspace -duration 3s -workers 32 -idle 10000
//
// Figures vary with the machine; compare the columns of one run, not runs.
package main
