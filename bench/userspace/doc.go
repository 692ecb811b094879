// Command userspace-bench measures the userspace data path: the same load
// (wrk for HTTP, a Go generator for the stream, the idle connections and UDP)
// drives the same backends four ways in one run,
//
//   - direct: straight to the backends;
//   - userspace: to a ClusterIP, REDIRECTed by the portals of a real
//     userspace.Proxier (a child process, as svcproxy runs it) to its listener;
//   - haproxy: to Debian's HAProxy in TCP mode with `option splice-auto`;
//   - haproxy-redirect: to the same HAProxy (on frontends of its own) through
//     a REDIRECT from a virtual address, as the userspace proxy is reached:
//     the two proxies compared at equal footing, and what the REDIRECT costs
//     a proxy,
//
// and reports connections/s (one short connection each), requests/s (small
// requests on keep-alive connections, wrk), Gbit/s (one bulk stream), the CPU
// time each proxy process spends per connection and per request, and the part
// of it spent in the kernel (from /proc/PID/stat: less sensitive to other load
// than the rates), where the rest of the machine's time went meanwhile (wrk's
// CPU, the backends', softirq and idle time: is a row bound by CPU, and whose;
// and steal time, what the hypervisor gave to other guests), the same split per
// gigabyte of the one stream, its threads' voluntary
// and non-voluntary context switches per connection and per request
// (/proc/PID/task/*/status),
// the userspace proxy's heap allocations per connection and per request
// (runtime/metrics: exact), and the memory each proxy process needs per idle
// proxied connection. UDP (userspace against direct: HAProxy 2.6 proxies no
// UDP): datagrams/s, new sessions/s, and the cost of a session: the proxy's
// CPU time per exchange and per new session, and its memory (RSS and live
// heap) per open session. It names any wrk run during which the TCP counters
// of either namespace show a SYN sent again, a timeout or a drop: a run that
// measured the kernel's timers too.
// -syscalls adds each proxy's system calls per connection and per request
// (strace -c); -profile the proxier child's CPU, block and allocation
// profiles and execution traces (and the one stream's CPU profile and
// trace); -proxier-procs sets the proxier child's GOMAXPROCS and
// -haproxy-threads HAProxy's nbthread (default 2), to compare both at equal
// footing.
// -json FILE also writes the TCP table's figures and ratios, with the
// command, the date and the load, as JSON, which bench/plot draws as an SVG.
//
// It needs root: it re-executes itself with `unshare --net` in a private network
// namespace (the node: backends and proxies), makes a second one for the load
// (the client, across a veth link), and installs the portals in the node with
// iptables-restore; both namespaces disappear with the process. Run it with
// `make bench` or:
//
//	go run ./bench/userspace -duration 5s -connections 32 -idle 10000
//	go run ./bench/userspace -udp=false -syscalls    # the TCP rows and system calls only
//	go run ./bench/userspace -tcp=false              # the UDP rows only
//
// Figures vary with the machine; compare the columns of one run, not runs.
package main
