package views

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/svcproxy/svcproxy/lab/topology"
)

// labInput is a packet from host from to web's ClusterIP in the default lab.
func labInput(from string) pathInput {
	p := topology.DefaultPlan()
	h, _ := p.Host(from)
	names := p.Names()
	return pathInput{proto: "tcp", from: from, src: h.Addr, dst: netip.MustParseAddrPort("198.18.0.20:80"),
		local: h.Role == topology.RoleNode, node: "node", nodeAddr: p.Node.Addr,
		name: func(a netip.Addr) string { return names[a] }, dnatWhat: "DNAT", verdict: "ACCEPT"}
}

// steps writes a path one step a line, as a reader of the page goes
// through it: "send client -> node  198.19.1.2:P -> 198.18.0.20:80".
func steps(p PacketPath) string {
	var b strings.Builder
	for _, s := range p.Steps {
		where := s.At
		if s.Kind == "send" {
			where = s.From + " -> " + s.To
		}
		dir := ""
		if s.Reply {
			dir = " reply"
		}
		fmt.Fprintf(&b, "%d%s %s %s  %s -> %s", s.Conn, dir, s.Kind, where, s.Src, s.Dst)
		if s.Kind == "rewrite" {
			fmt.Fprintf(&b, "  %s %s (was %s)", s.What, s.Changed, s.Before)
		}
		b.WriteString("\n")
	}
	for _, e := range p.Conntrack {
		fmt.Fprintf(&b, "conntrack %d: %s -> %s | %s -> %s | %s\n", e.Conn, e.Sent[0], e.Sent[1], e.Reply[0], e.Reply[1], e.Means)
	}
	return b.String()
}

func TestBuildPath(t *testing.T) {
	web0 := netip.MustParseAddrPort("198.19.1.10:8080")
	tests := []struct {
		name string
		in   func() pathInput
		want string
	}{
		{"DNAT, the client kept", func() pathInput {
			in := labInput("client")
			in.dnat, in.dnatBy = web0, "iptables nat SVCP-SEP-VIDHDKFRU7YAZMR5"
			return in
		}, `1 open client  198.19.1.2:P -> 198.18.0.20:80
1 send client -> node  198.19.1.2:P -> 198.18.0.20:80
1 rewrite node  198.19.1.2:P -> 198.19.1.10:8080  DNAT dst (was 198.18.0.20:80)
1 send node -> web-0  198.19.1.2:P -> 198.19.1.10:8080
1 end web-0  198.19.1.2:P -> 198.19.1.10:8080
1 reply send web-0 -> node  198.19.1.10:8080 -> 198.19.1.2:P
1 reply rewrite node  198.18.0.20:80 -> 198.19.1.2:P  conntrack src (was 198.19.1.10:8080)
1 reply send node -> client  198.18.0.20:80 -> 198.19.1.2:P
1 reply end client  198.18.0.20:80 -> 198.19.1.2:P
conntrack 1: 198.19.1.2:P -> 198.18.0.20:80 | 198.19.1.10:8080 -> 198.19.1.2:P | DNAT to 198.19.1.10 (web-0)
`},
		{"DNAT and MASQUERADE, from outside", func() pathInput {
			in := labInput("outside")
			in.dnat, in.masq = web0, true
			return in
		}, `1 open outside  198.19.200.2:P -> 198.18.0.20:80
1 send outside -> node  198.19.200.2:P -> 198.18.0.20:80
1 rewrite node  198.19.200.2:P -> 198.19.1.10:8080  DNAT dst (was 198.18.0.20:80)
1 rewrite node  198.19.0.1:P -> 198.19.1.10:8080  MASQUERADE src (was 198.19.200.2:P)
1 send node -> web-0  198.19.0.1:P -> 198.19.1.10:8080
1 end web-0  198.19.0.1:P -> 198.19.1.10:8080
1 reply send web-0 -> node  198.19.1.10:8080 -> 198.19.0.1:P
1 reply rewrite node  198.18.0.20:80 -> 198.19.200.2:P  conntrack src dst (was 198.19.1.10:8080 198.19.0.1:P)
1 reply send node -> outside  198.18.0.20:80 -> 198.19.200.2:P
1 reply end outside  198.18.0.20:80 -> 198.19.200.2:P
conntrack 1: 198.19.200.2:P -> 198.18.0.20:80 | 198.19.1.10:8080 -> 198.19.0.1:P | DNAT to 198.19.1.10 (web-0), MASQUERADE: the pod saw 198.19.0.1 (node)
`},
		{"userspace: REDIRECT, then svcproxy's own connection", func() pathInput {
			in := labInput("client")
			in.redirect, in.upstream = 39215, netip.MustParseAddrPort("198.19.1.11:8080")
			return in
		}, `1 open client  198.19.1.2:P -> 198.18.0.20:80
1 send client -> node  198.19.1.2:P -> 198.18.0.20:80
1 rewrite node  198.19.1.2:P -> 198.19.0.1:39215  REDIRECT dst (was 198.18.0.20:80)
1 end node  198.19.1.2:P -> 198.19.0.1:39215
2 open node  198.19.0.1:Q -> 198.19.1.11:8080
2 send node -> web-1  198.19.0.1:Q -> 198.19.1.11:8080
2 end web-1  198.19.0.1:Q -> 198.19.1.11:8080
2 reply send web-1 -> node  198.19.1.11:8080 -> 198.19.0.1:Q
2 reply end node  198.19.1.11:8080 -> 198.19.0.1:Q
1 reply pass node  198.19.0.1:39215 -> 198.19.1.2:P
1 reply rewrite node  198.18.0.20:80 -> 198.19.1.2:P  conntrack src (was 198.19.0.1:39215)
1 reply send node -> client  198.18.0.20:80 -> 198.19.1.2:P
1 reply end client  198.18.0.20:80 -> 198.19.1.2:P
conntrack 1: 198.19.1.2:P -> 198.18.0.20:80 | 198.19.0.1:39215 -> 198.19.1.2:P | REDIRECT to svcproxy's listener :39215 (userspace: the first connection)
conntrack 2: 198.19.0.1:Q -> 198.19.1.11:8080 | 198.19.1.11:8080 -> 198.19.0.1:Q | svcproxy's own connection to 198.19.1.11 (web-1) (userspace: the second connection)
`},
		{"userspace, from the node itself: REDIRECT to loopback", func() pathInput {
			in := labInput("node")
			in.redirect = 39215
			return in
		}, `1 open node  198.19.0.1:P -> 198.18.0.20:80
1 rewrite node  198.19.0.1:P -> 127.0.0.1:39215  REDIRECT dst (was 198.18.0.20:80)
1 end node  198.19.0.1:P -> 127.0.0.1:39215
1 reply pass node  127.0.0.1:39215 -> 198.19.0.1:P
1 reply rewrite node  198.18.0.20:80 -> 198.19.0.1:P  conntrack src (was 127.0.0.1:39215)
1 reply end node  198.18.0.20:80 -> 198.19.0.1:P
conntrack 1: 198.19.0.1:P -> 198.18.0.20:80 | 127.0.0.1:39215 -> 198.19.0.1:P | REDIRECT to svcproxy's listener :39215 (userspace: the first connection)
`},
		{"socket LB: connect() rewritten in the socket", func() pathInput {
			in := labInput("client")
			in.socket = web0
			return in
		}, `1 open client  198.19.1.2:P -> 198.18.0.20:80
1 rewrite client  198.19.1.2:P -> 198.19.1.10:8080  connect() dst (was 198.18.0.20:80)
1 send client -> node  198.19.1.2:P -> 198.19.1.10:8080
1 pass node  198.19.1.2:P -> 198.19.1.10:8080
1 send node -> web-0  198.19.1.2:P -> 198.19.1.10:8080
1 end web-0  198.19.1.2:P -> 198.19.1.10:8080
1 reply send web-0 -> node  198.19.1.10:8080 -> 198.19.1.2:P
1 reply pass node  198.19.1.10:8080 -> 198.19.1.2:P
1 reply send node -> client  198.19.1.10:8080 -> 198.19.1.2:P
1 reply rewrite client  198.18.0.20:80 -> 198.19.1.2:P  getpeername() src (was 198.19.1.10:8080)
1 reply end client  198.18.0.20:80 -> 198.19.1.2:P
conntrack 1: 198.19.1.2:P -> 198.19.1.10:8080 | 198.19.1.10:8080 -> 198.19.1.2:P | no rewrite: sent to 198.19.1.10 (web-0) itself (socklb: connect() was rewritten in the socket)
`},
		{"REJECT: no endpoint", func() pathInput {
			in := labInput("client")
			in.verdict = "REJECT"
			return in
		}, `1 open client  198.19.1.2:P -> 198.18.0.20:80
1 send client -> node  198.19.1.2:P -> 198.18.0.20:80
1 end node  198.19.1.2:P -> 198.18.0.20:80
1 reply pass node  198.19.0.1 -> 198.19.1.2
1 reply send node -> client  198.19.0.1 -> 198.19.1.2
1 reply end client  198.19.0.1 -> 198.19.1.2
`},
		{"DROP: traffic policy Local, no endpoint here", func() pathInput {
			in := labInput("outside")
			in.verdict = "DROP"
			return in
		}, `1 open outside  198.19.200.2:P -> 198.18.0.20:80
1 send outside -> node  198.19.200.2:P -> 198.18.0.20:80
1 end node  198.19.200.2:P -> 198.18.0.20:80
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := steps(buildPath(tt.in()))
			t.Logf("\n%s", got)
			require.Equal(t, tt.want, got)
		})
	}
}

// Every step says where it happens and what it did, so that the page has
// something to draw for each.
func TestBuildPathStepsComplete(t *testing.T) {
	in := labInput("client")
	in.redirect, in.upstream = 39215, netip.MustParseAddrPort("198.19.1.11:8080")
	p := buildPath(in)
	require.Contains(t, p.Ports, "Q: ")
	for i, s := range p.Steps {
		switch s.Kind {
		case "send":
			require.NotEmpty(t, s.From, "step %d", i)
			require.NotEmpty(t, s.To, "step %d", i)
		case "rewrite":
			require.NotEmpty(t, s.Changed, "step %d: a rewrite changes something", i)
			require.NotEmpty(t, s.What, "step %d", i)
		default:
			require.NotEmpty(t, s.At, "step %d", i)
			require.NotEmpty(t, s.What, "step %d", i)
		}
	}
}
