package views

import (
	"fmt"
	"net/netip"
	"strings"
)

// The packet's way as `svclab web` draws it: where a trace's packet goes,
// host by host, with its addresses after every rewrite; svcproxy's own
// connection in userspace mode; the replies back through conntrack; and the
// entries conntrack holds for them. The tracers say which rules matched; a
// PacketPath says what those rules did to the packet.

// PacketPath is a trace's packet drawn step by step.
type PacketPath struct {
	// Steps are in the order they happen: the sender's connection, then
	// (userspace mode) svcproxy's own, then the replies.
	Steps []PacketStep `json:"steps"`
	// Conntrack are the entries the node's conntrack table holds for the
	// connections, as `svclab conntrack` lists them.
	Conntrack []PathEntry `json:"conntrack"`
	// Ports says what the letters in the addresses stand for: "P: the port
	// the client's kernel picks".
	Ports string `json:"ports"`
}

// PacketStep is one step of a PacketPath.
type PacketStep struct {
	// Kind is "open" (At's socket sends the first packet of a
	// connection), "send" (the packet crosses the link From -> To),
	// "rewrite" (At changes its source or destination), "pass" (At
	// forwards it unchanged) or "end" (At takes the packet: a socket reads
	// it, a REJECT answers it, a DROP throws it away).
	Kind string `json:"kind"`
	// Conn is 1 for the sender's connection and 2 for the connection
	// svcproxy opens to a pod (userspace mode).
	Conn  int    `json:"conn"`
	Reply bool   `json:"reply"` // the packet goes back to the connection's opener
	From  string `json:"from,omitempty"`
	To    string `json:"to,omitempty"`
	At    string `json:"at,omitempty"`
	// Src and Dst are the packet's addresses after the step.
	Src string `json:"src"`
	Dst string `json:"dst"`
	// What names a rewrite ("DNAT", "MASQUERADE", "REDIRECT", "connect()",
	// "conntrack", "getpeername()") or says what happens at an open, a
	// pass or an end.
	What string `json:"what,omitempty"`
	// By is the rule, map or table that did it: "nat SVCP-SEP-VIDHDKFRU7YAZMR5".
	By string `json:"by,omitempty"`
	// Changed is which addresses a rewrite changed, "src", "dst" or "src
	// dst"; Before is what they were.
	Changed string `json:"changed,omitempty"`
	Before  string `json:"before,omitempty"`
}

// PathEntry is one conntrack entry of a PacketPath: what was sent and what
// the kernel expects back, as `svclab conntrack` shows them.
type PathEntry struct {
	Conn  int       `json:"conn"`
	Proto string    `json:"proto"`
	Sent  [2]string `json:"sent"`  // source, destination
	Reply [2]string `json:"reply"` // source, destination
	Means string    `json:"means"`
}

// pathBuilder writes a PacketPath's steps, keeping the packet's addresses.
type pathBuilder struct {
	p        PacketPath
	conn     int
	reply    bool
	src, dst string
}

func (b *pathBuilder) add(s PacketStep) {
	s.Conn, s.Reply, s.Src, s.Dst = b.conn, b.reply, b.src, b.dst
	b.p.Steps = append(b.p.Steps, s)
}

// open starts connection conn at host: its first packet, src to dst.
func (b *pathBuilder) open(conn int, host, src, dst, what string) {
	b.conn, b.reply, b.src, b.dst = conn, false, src, dst
	b.add(PacketStep{Kind: "open", At: host, What: what})
}

// answer turns the packet around: the reply of the current connection,
// from src to dst.
func (b *pathBuilder) answer(src, dst string) {
	b.reply, b.src, b.dst = true, src, dst
}

func (b *pathBuilder) send(from, to string) {
	if from != to {
		b.add(PacketStep{Kind: "send", From: from, To: to})
	}
}

// rewrite sets the packet's addresses at host, saying which changed.
func (b *pathBuilder) rewrite(host, what, by, src, dst string) {
	var changed, before []string
	if src != b.src {
		changed, before = append(changed, "src"), append(before, b.src)
	}
	if dst != b.dst {
		changed, before = append(changed, "dst"), append(before, b.dst)
	}
	b.src, b.dst = src, dst
	b.add(PacketStep{Kind: "rewrite", At: host, What: what, By: by, Changed: strings.Join(changed, " "), Before: strings.Join(before, " ")})
}

func (b *pathBuilder) pass(host, what string) { b.add(PacketStep{Kind: "pass", At: host, What: what}) }
func (b *pathBuilder) end(host, what string)  { b.add(PacketStep{Kind: "end", At: host, What: what}) }

func (b *pathBuilder) entry(proto string, sent, reply [2]string, means string) {
	b.p.Conntrack = append(b.p.Conntrack, PathEntry{Conn: b.conn, Proto: proto, Sent: sent, Reply: reply, Means: means})
}

// pathInput is what a PacketPath is drawn from: the trace's packet, the
// lab's names for addresses, and what the rules (or IPVS, or the socket
// LB's program) did.
type pathInput struct {
	proto    string // "tcp" or "udp"
	from     string // the lab host that sends
	src      netip.Addr
	dst      netip.AddrPort
	local    bool   // the node sends it itself
	node     string // the node's name
	nodeAddr netip.Addr
	name     func(netip.Addr) string // a lab host's name, "" for none

	dnat     netip.AddrPort // the destination a DNAT (or IPVS) chose
	dnatWhat string         // "DNAT", "IPVS"
	dnatBy   string
	masq     bool
	masqBy   string
	redirect uint16 // userspace: the REDIRECT's port, svcproxy's listener
	redirBy  string
	upstream netip.AddrPort // userspace: the endpoint svcproxy dials
	socket   netip.AddrPort // socklb: the pod connect() was rewritten to
	socketBy string
	verdict  string // ACCEPT, REJECT, DROP
	deliver  bool   // to the node itself
}

// host names an address for the picture: the lab host's name, or the
// address itself.
func (in pathInput) host(a netip.Addr) string {
	if in.name != nil {
		if n := in.name(a); n != "" {
			return n
		}
	}
	return a.String()
}

// named writes an address and its lab host's name, as svclab conntrack
// does: "198.19.1.10 (web-0)".
func (in pathInput) named(a netip.Addr) string {
	if n := in.host(a); n != a.String() {
		return a.String() + " (" + n + ")"
	}
	return a.String()
}

// withPort writes an address with a port that a kernel picks, named by a
// letter: "198.19.1.2:P".
func withPort(a netip.Addr, letter string) string {
	if a.Is6() {
		return "[" + a.String() + "]:" + letter
	}
	return a.String() + ":" + letter
}

// sender is where the packet starts: the node's rules see it at once when
// the node sends it itself.
func (in pathInput) sender() string {
	if in.local {
		return in.node
	}
	return in.from
}

// buildPath draws the way of in's packet: a REDIRECT to svcproxy, a DNAT
// (iptables, nftables, IPVS), a socket connected to the pod, a REJECT, a
// DROP, or no rewrite at all.
func buildPath(in pathInput) PacketPath {
	var p PacketPath
	switch {
	case in.socket.IsValid():
		p = socketPath(in)
	case in.redirect != 0:
		p = redirectPath(in)
	case in.dnat.IsValid():
		p = dnatPath(in)
	case in.verdict == "REJECT" || in.verdict == "DROP":
		p = refusedPath(in)
	default:
		p = plainPath(in)
	}
	p.Ports = "P: the port the sender's kernel picks for its socket"
	if in.redirect != 0 {
		p.Ports += "; Q: the port the node's kernel picks for svcproxy's connection"
	}
	return p
}

// dnatPath: the node rewrites the destination to a pod (and, marked, the
// source to its own address), conntrack remembers it, and reverses both on
// the reply.
func dnatPath(in pathInput) PacketPath {
	b := &pathBuilder{}
	sender, pod := in.sender(), in.host(in.dnat.Addr())
	client := withPort(in.src, "P")
	b.open(1, sender, client, in.dst.String(), "connects to "+in.dst.String())
	b.send(sender, in.node)
	b.rewrite(in.node, in.dnatWhat, in.dnatBy, client, in.dnat.String())
	seen := client
	if in.masq {
		seen = withPort(in.nodeAddr, "P")
		b.rewrite(in.node, "MASQUERADE", in.masqBy, seen, in.dnat.String())
	}
	b.send(in.node, pod)
	b.end(pod, "the pod's server accepts; it sees "+seen+" as its client")
	b.answer(in.dnat.String(), seen)
	b.send(pod, in.node)
	b.rewrite(in.node, "conntrack", "the connection's conntrack entry", in.dst.String(), client)
	b.send(in.node, sender)
	b.end(sender, "reads the answer from "+in.dst.String()+": the rewrites are invisible to it")
	b.conn = 1
	means := "DNAT to " + in.named(in.dnat.Addr())
	if in.masq {
		means += ", MASQUERADE: the pod saw " + in.named(in.nodeAddr)
	}
	b.entry(in.proto, [2]string{client, in.dst.String()}, [2]string{in.dnat.String(), seen}, means)
	return b.p
}

// redirectPath: userspace mode. The node REDIRECTs the connection to
// svcproxy's listener, where it ends; svcproxy opens a second connection of
// its own to a pod and copies the bytes between the two.
func redirectPath(in pathInput) PacketPath {
	b := &pathBuilder{}
	sender := in.sender()
	client := withPort(in.src, "P")
	// REDIRECT sends to the address of the link the packet came in on, or
	// to loopback for the node's own packets (iptables-extensions(8)).
	listenerAddr := in.nodeAddr
	if in.local {
		listenerAddr = netip.MustParseAddr("127.0.0.1")
		if in.src.Is6() {
			listenerAddr = netip.IPv6Loopback()
		}
	}
	listener := netip.AddrPortFrom(listenerAddr, in.redirect).String()
	b.open(1, sender, client, in.dst.String(), "connects to "+in.dst.String())
	b.send(sender, in.node)
	b.rewrite(in.node, "REDIRECT", in.redirBy, client, listener)
	b.end(in.node, fmt.Sprintf("svcproxy's listener :%d accepts: the client's connection ends in svcproxy", in.redirect))
	b.entry(in.proto, [2]string{client, in.dst.String()}, [2]string{listener, client}, fmt.Sprintf("REDIRECT to svcproxy's listener :%d (userspace: the first connection)", in.redirect))

	if in.upstream.IsValid() {
		pod := in.host(in.upstream.Addr())
		proxy := withPort(in.nodeAddr, "Q")
		b.open(2, in.node, proxy, in.upstream.String(), "svcproxy connects to "+pod+" (round-robin), a connection of its own")
		b.send(in.node, pod)
		b.end(pod, "the pod's server accepts; it sees "+proxy+" (the node) as its client")
		b.entry(in.proto, [2]string{proxy, in.upstream.String()}, [2]string{in.upstream.String(), proxy}, "svcproxy's own connection to "+in.named(in.upstream.Addr())+" (userspace: the second connection)")
		b.answer(in.upstream.String(), proxy)
		b.send(pod, in.node)
		b.end(in.node, "svcproxy reads the pod's answer and writes it to the client's connection")
	}
	b.conn = 1
	b.answer(listener, client)
	b.pass(in.node, "svcproxy's socket answers from "+listener)
	b.rewrite(in.node, "conntrack", "the client's connection's conntrack entry", in.dst.String(), client)
	b.send(in.node, sender)
	b.end(sender, "reads the answer from "+in.dst.String())
	return b.p
}

// socketPath: socklb mode. The socket LB's program rewrote connect() in the
// sender's socket: every packet carries the pod's address, no rule of the
// node rewrites it, and the program tells the application its peer is the
// ClusterIP.
func socketPath(in pathInput) PacketPath {
	b := &pathBuilder{}
	pod := in.host(in.socket.Addr())
	client := withPort(in.src, "P")
	b.open(1, in.from, client, in.dst.String(), "calls connect("+in.dst.String()+")")
	b.rewrite(in.from, "connect()", in.socketBy, client, in.socket.String())
	b.send(in.from, in.node)
	b.pass(in.node, "forwards it unchanged: the destination is a pod, no rule rewrites it")
	b.send(in.node, pod)
	b.end(pod, "the pod's server accepts; it sees "+client+" as its client")
	b.answer(in.socket.String(), client)
	b.send(pod, in.node)
	b.pass(in.node, "forwards it unchanged")
	b.send(in.node, in.from)
	hook := "getpeername()"
	if in.proto == "udp" {
		hook = "recvmsg()"
	}
	b.rewrite(in.from, hook, "the socket LB's "+strings.TrimSuffix(hook, "()")+" program: the address the application is told, not the packet", in.dst.String(), client)
	b.end(in.from, "reads the answer; "+hook+" says "+in.dst.String())
	b.conn = 1
	b.entry(in.proto, [2]string{client, in.socket.String()}, [2]string{in.socket.String(), client}, "no rewrite: sent to "+in.named(in.socket.Addr())+" itself (socklb: connect() was rewritten in the socket)")
	return b.p
}

// refusedPath: no endpoint (REJECT: the node answers at once) or traffic
// policy Local with none on this node (DROP: no answer).
func refusedPath(in pathInput) PacketPath {
	b := &pathBuilder{}
	sender := in.sender()
	client := withPort(in.src, "P")
	b.open(1, sender, client, in.dst.String(), "connects to "+in.dst.String())
	b.send(sender, in.node)
	if in.verdict == "DROP" {
		b.end(in.node, "DROP: thrown away, no answer; the client retries until it times out")
		return b.p
	}
	b.end(in.node, "REJECT: no endpoint to take it")
	// The ICMP error comes from the node, not from the ClusterIP.
	b.answer(in.nodeAddr.String(), in.src.String())
	b.pass(in.node, "answers with ICMP port unreachable, from its own address")
	b.send(in.node, sender)
	b.end(sender, "connect() fails: connection refused")
	return b.p
}

// plainPath: no rule rewrote the packet: it is delivered to the node, or
// goes on to its destination unchanged.
func plainPath(in pathInput) PacketPath {
	b := &pathBuilder{}
	sender := in.sender()
	client := withPort(in.src, "P")
	b.open(1, sender, client, in.dst.String(), "connects to "+in.dst.String())
	b.send(sender, in.node)
	if in.deliver {
		b.end(in.node, "delivered to the node itself: no rule rewrote it")
		return b.p
	}
	to := in.host(in.dst.Addr())
	b.pass(in.node, "forwards it unchanged: no rule rewrote it")
	b.send(in.node, to)
	b.end(to, "takes the packet")
	return b.p
}
