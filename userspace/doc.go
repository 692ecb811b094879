// Package userspace proxies ClusterIP traffic in Go: a REDIRECT rule (a "portal")
// delivers a packet sent to a Service's virtual address to a local listener, and
// the Proxier copies the bytes to one of the Service's endpoints.
//
// This is kube-proxy's historic userspace mode (removed in Kubernetes 1.26), done
// again with today's data model and a few things it got wrong made right:
//
//   - one listener per service port, TCP and UDP, on a port chosen by the kernel
//     or taken from a configured range; a NodePort gets a listener of its own on
//     the node port of every node address;
//   - TCP: a dialling goroutine takes each accepted connection and dials an
//     endpoint, trying endpoints with growing timeouts (250ms, 500ms, 1s, 2s,
//     as kube-proxy's tryConnect) so a refusing or dead endpoint costs the
//     client nothing, then hands over to one goroutine per direction (copying
//     in the dialler instead would keep the stack the dial grew under every
//     idle connection). Diallers are reused while connections keep coming
//     and end a second after they stop: net's dial runs about 3 KiB deep,
//     and a fresh goroutine would grow its stack on every dial.
//     Two goroutines per connection, not one: Go's poller parks a goroutine
//     on one socket, and waiting on both at once would take an event loop of
//     our own.
//     Each direction (halfCopy.run) parks in Go's poller holding nothing, and
//     when the socket is readable reads what arrived into a pooled 16 KiB
//     buffer and writes it on, both inside the poller's callback
//     (syscall.RawConn.Read): per small message one read and one write,
//     made with syscall.RawSyscall, since on non-blocking sockets they never
//     wait (the runtime, not told, hands no thread the P meanwhile). The
//     poller is edge-triggered and does not say whether a FIN came with the
//     data, so before parking again a direction must know that nothing is
//     left: TCP_INQ makes the kernel report, with each read, what is still
//     queued (a FIN counts as 1), and parking inside the callback keeps every
//     event that came after that read. Until a direction has TCP_INQ (it
//     asks after its second message, as asking is a system call too; Linux
//     before 4.18 has none) it reads until the socket is empty. A write that
//     would wait, and a read that fills the buffer (a bulk transfer: the
//     bytes queued beyond it are spliced, splice(2) through a pipe, never
//     copied into Go, exactly as many as are queued, so no pipe is held while
//     the connection idles) leave the callback first. End of stream is passed
//     on as a half-close (FIN), or, when the other direction has ended
//     already, by closing both sockets; an error as a reset of both sides.
//     The listener carries TCP keep-alive with Go's timers, which the
//     accepted sockets inherit from it; the endpoint's socket gets
//     SO_KEEPALIVE with the kernel's timers, a backstop against holding a
//     vanished endpoint's connection forever (endpointDialer says why);
//   - UDP: one session per client address, with its own socket to the endpoint,
//     an idle timeout and a cap per listener (the idlest session makes room);
//     three goroutines per listener whatever the number of sessions (read,
//     open sessions, replies through one epoll set); replies leave from the
//     listener socket and the address the client wrote to, so conntrack can
//     turn them back into the Service's;
//   - a Balancer: round-robin over the usable endpoints, ClientIP session
//     affinity with the Service's timeout; a second one over the node's own
//     endpoints, for the traffic a Local traffic policy governs (ClusterIP
//     traffic for internalTrafficPolicy; node port, external and
//     load-balancer IP traffic, whose portals lead to the node port's
//     listener, for externalTrafficPolicy), as the kernel paths choose;
//   - portals rendered as iptables-restore text (Render, a pure function) and
//     applied in one transaction: every chain at the first sync, after a
//     failure and every 30s, only the rules that changed otherwise (a
//     Service created or deleted writes its own rules, not every portal's,
//     docs/design.md); a port with no endpoints is REJECTed at once
//     instead of leaving clients to time out; the listeners take only what a
//     portal redirected (SVCP-LISTENERS, a conntrack match), though they are
//     bound to 0.0.0.0;
//   - counters per service port (Stats) for metrics and the offload promoter;
//   - one IP family per Proxier (Config.Family): a dual-stack node runs two,
//     the IPv6 one with listeners on :: and its portals in ip6tables, where
//     nat REDIRECT works as in iptables.
//
// Established TCP connections are kept when their endpoint turns not-ready or
// leaves, or their Service is deleted: the endpoint is no longer picked, and
// its connections finish on it. When the proxy must end a connection itself,
// the client gets a reset, never a clean FIN that looks like an empty reply.
// An endpoint that leads back into the proxy (its own listener, a ClusterIP it
// serves) is never dialled, and the connections and sessions keep a reserve of
// the process's file descriptors free for the rest of the process.
//
// The Proxier is driven by Snapshots (Sync) and stopped by Shutdown: it stops
// accepting (new connections are refused), lets open connections finish within
// a grace period and resets those that remain, then removes its portals.
// Cleanup removes every chain and hook this package ever makes, for
// `svcproxy --cleanup`.
package userspace
