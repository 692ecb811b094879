// Package tcpload is the small TCP load the data-path benchmarks share
// (bench/socklb, bench/kubeproxy): a server that answers each 64-byte
// request with 64 bytes, and the client's two loads, new connections one at
// a time (connect, one request and its answer, close) and keep-alive
// requests on a few open connections, one request in flight on each.
//
// It is a loop of a few dozen lines, not wrk: wrk speaks HTTP, and makes a
// new connection per request only with "Connection: close", where the
// server closes first and its TIME_WAIT sockets meet the client's reused
// ports. Here the client closes first, so the TIME_WAIT sockets are the
// client's, which never reuses a port that has one.
//
// A request that starts with '?' asks the server which address the client
// reached, instead of an echo: the answer is the server socket's local
// address, "198.19.0.7:8080", padded to MsgSize. Behind a Service that is
// the endpoint the proxy chose, which is how bench/kubeproxy's probes see
// an endpoint come and go. Both answers cost the server the same.
//
// The client also reads its network namespace's TCP counters (TCPStats): a
// SYN sent again costs a 1-second retransmission timeout, and a slice of
// load with one measured the kernel's timer, not the path.
package tcpload
