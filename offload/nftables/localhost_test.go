package nftables

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/internal/netnstest"
	knft "github.com/svcproxy/svcproxy/kernel/nftables"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// TestLocalhostLeftovers: a process that serves no localhost NodePorts deletes
// the reject map, chains and counters an earlier one with
// Config.LocalhostNodePorts left in the table (kube-proxy's setupNFTables
// does the same), at its first, full, sync; with LocalhostNodePorts they
// stay. On the Fake, and on the real kernel (one transaction must delete the
// map before the chains its elements go to).
func TestLocalhostLeftovers(t *testing.T) {
	t.Run("fake", func(t *testing.T) {
		checkLocalhostLeftovers(t, knft.NewFake(Table), func(fn func() error) error { return fn() })
	})
	t.Run("kernel", func(t *testing.T) {
		netnstest.RequireRoot(t, "nft")
		ns := netnstest.New(t)
		var nft knft.Interface
		if err := ns.Do(func() (err error) { nft, err = knft.New(Table); return err }); err != nil {
			t.Fatal(err)
		}
		checkLocalhostLeftovers(t, nft, ns.Do)
	})
}

func checkLocalhostLeftovers(t *testing.T, nft knft.Interface, in func(func() error) error) {
	snap := st.Snapshot(st.Service("dns", "198.18.0.53", 53, st.ThreeEndpoints()[:1], st.WithProtocol(service.UDP), st.WithNodePort(30053)))
	sync := func(localhost bool) {
		t.Helper()
		p, err := New(Config{Node: dataplane.Node{NodeName: st.ThisNode}, LocalhostNodePorts: localhost, NFT: nft})
		if err != nil {
			t.Fatal(err)
		}
		if err := in(func() error { return p.Sync(context.Background(), snap) }); err != nil {
			t.Fatal(err)
		}
	}
	objects := func() (found []string) {
		t.Helper()
		var all map[string][]string
		if err := in(func() (err error) { all, err = nft.ListAll(context.Background()); return err }); err != nil {
			t.Fatal(err)
		}
		for kind, names := range map[string][]string{
			"map":     {mapLocalhostNodePortReject},
			"chain":   {prefixLocalhostReject + "udp", prefixLocalhostReject + "sctp"},
			"counter": {prefixLocalhostRejected + "udp", prefixLocalhostRejected + "sctp"},
		} {
			for _, n := range names {
				if slices.Contains(all[kind], n) {
					found = append(found, kind+" "+n)
				}
			}
		}
		return found
	}
	sync(true)
	if got := objects(); len(got) != 5 {
		t.Fatalf("with LocalhostNodePorts: %v, want the map, 2 chains and 2 counters", got)
	}
	sync(true) // a second process adopting the table keeps them
	if got := objects(); len(got) != 5 {
		t.Fatalf("adopted with LocalhostNodePorts: %v, want 5 objects", got)
	}
	sync(false)
	if got := objects(); len(got) != 0 {
		t.Fatalf("without LocalhostNodePorts: %v left", got)
	}
}

// TestTraceLocalhostNodePorts: with LocalhostNodePorts, the node's own UDP
// packet to 127.0.0.1:<nodePort> is rejected (kube-proxy's
// localhost-nodeport-reject-udp), its TCP one passes to the localhost
// listener (no DNAT), and the node's address still reaches the endpoints.
func TestTraceLocalhostNodePorts(t *testing.T) {
	cfg := testConfig
	cfg.LocalhostNodePorts = true
	f := syncedFake(t, cfg, st.Snapshot(
		st.Service("web", "198.18.0.10", 80, st.ThreeEndpoints()[:1], st.WithNodePort(30080)),
		st.Service("dns", "198.18.0.53", 53, st.ThreeEndpoints()[:1], st.WithProtocol(service.UDP), st.WithNodePort(30053)),
	))
	local := func(proto, dst string) knft.Packet {
		return knft.Packet{Proto: proto, Src: netip.MustParseAddr("127.0.0.1"), Dst: netip.MustParseAddrPort(dst), Local: true}
	}
	for _, tt := range []struct {
		name string
		pkt  knft.Packet
		want string
		via  string // a chain the trace passes
	}{
		{"UDP to a loopback NodePort: rejected", local("udp", "127.0.0.1:30053"), "REJECT", prefixLocalhostReject + "udp"},
		{"TCP to a loopback NodePort: the listener's", local("tcp", "127.0.0.1:30080"), "ACCEPT", ""},
		{"UDP to the node's address: its endpoint", knft.Packet{Proto: "udp", Src: nodeIP, Dst: netip.MustParseAddrPort("198.19.0.1:30053"), Local: true}, "DNAT 198.19.1.10:8080, MASQUERADE", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := f.Trace(tt.pkt)
			if err != nil {
				t.Fatal(err)
			}
			if got := tr.Result(); got != tt.want {
				t.Errorf("result %q, want %q\n%s", got, tt.want, tr)
			}
			if !strings.Contains(tr.String(), tt.via) {
				t.Errorf("the trace does not pass %s\n%s", tt.via, tr)
			}
		})
	}
}
