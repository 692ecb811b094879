package kubeproxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/svcproxy/svcproxy/bench/tcpload"
	"github.com/svcproxy/svcproxy/internal/netnstest"
)

// The topology of one run, made for the run and removed after it (doc.go
// draws it): the proxy's node, a client pod routed through it, and one
// backend namespace that owns every pod address (198.19.0.0/17) and every
// Service address (198.18.0.0/16) as local routes.
var (
	nodeClientSide = netip.MustParsePrefix("198.19.200.1/24")
	clientPod      = netip.MustParsePrefix("198.19.200.2/24")
	nodeBackSide   = netip.MustParsePrefix("198.19.201.1/24")
	backendSide    = netip.MustParsePrefix("198.19.201.2/24")
	// The direct link: the client to the backend, past the node, the
	// data path's reference for the machine's load at the moment.
	directClient  = netip.MustParsePrefix("198.19.202.2/24")
	directBackend = netip.MustParsePrefix("198.19.202.1/24")
	podCIDR       = netip.MustParsePrefix("198.19.0.0/17")
	serviceCIDR   = netip.MustParsePrefix("198.18.0.0/16")
	clusterCIDR   = netip.MustParsePrefix("198.19.0.0/16")
)

// relayAddr is where the proxies find the API server, inside the node.
const relayAddr = "127.0.0.1:6443"

// topology is one run's namespaces and what runs in them.
type topology struct {
	node, client, backend *netnstest.NS
	kubeconfig            string // the API server through the relay, for the proxies
}

// newTopology builds the namespaces, starts the backend's server and the
// relay to the API server (whose kubeconfig is apiKubeconfig). Everything
// goes at t's cleanup.
//
// A packet from the client to a Service address crosses the node, where
// the proxy's rules send it to an endpoint; without a rule it reaches the
// backend at the Service address itself, where nothing listens on port 80:
// refused at once, so a probe never waits for a timeout. The backend
// answers on port 8080 at every pod address (a local route for the whole
// range, "AnyIP"), and tells the client which address it reached. A second
// link joins the client and the backend past the node: the data path's
// reference, the same load without the proxy's namespace.
func newTopology(t testing.TB, apiKubeconfig string) *topology {
	t.Helper()
	topo := &topology{node: netnstest.New(t), client: netnstest.New(t), backend: netnstest.New(t)}
	node, client, backend := topo.node, topo.client, topo.backend
	node.Sysctl(t, "net.ipv4.ip_forward", "1")
	// The backend answers from behind the node on the link the packet
	// came in by: no ICMP redirects (they share the rate limit with a
	// REJECT's port-unreachable).
	node.Sysctl(t, "net.ipv4.conf.all.send_redirects", "0")
	node.Sysctl(t, "net.ipv4.conf.default.send_redirects", "0")
	netnstest.Veth(t, node, "to-client", nodeClientSide, client, "eth0", clientPod)
	netnstest.Veth(t, node, "to-backend", nodeBackSide, backend, "eth0", backendSide)
	netnstest.Veth(t, client, "direct", directClient, backend, "direct", directBackend)
	client.Run(t, "ip", "route", "add", "default", "via", nodeClientSide.Addr().String())
	backend.Run(t, "ip", "route", "add", "default", "via", nodeBackSide.Addr().String())
	for _, p := range []netip.Prefix{podCIDR, serviceCIDR} {
		node.Run(t, "ip", "route", "add", p.String(), "via", backendSide.Addr().String())
		backend.Run(t, "ip", "route", "add", "local", p.String(), "dev", "lo")
	}
	// 64,512 ports per destination: the client never waits for a port
	// (TIME_WAIT lasts 60 s).
	client.Sysctl(t, "net.ipv4.ip_local_port_range", "1024 65535")
	var ln net.Listener
	if err := backend.Do(func() (err error) {
		ln, err = net.Listen("tcp4", fmt.Sprintf(":%d", targetPort))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go tcpload.Serve(ln)
	topo.kubeconfig = topo.relay(t, apiKubeconfig)
	return topo
}

// relay makes the API server (on the machine's loopback) reachable at
// relayAddr inside the node, where the proxies run: a listener in the
// node's namespace whose connections this process joins to the API server,
// byte for byte (TLS goes through untouched; the serving certificate names
// 127.0.0.1). It returns a kubeconfig for that address.
func (topo *topology) relay(t testing.TB, apiKubeconfig string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(apiKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	var upstream string
	for _, c := range cfg.Clusters {
		u := c.Server
		upstream = u[len("https://"):]
		c.Server = "https://" + relayAddr
	}
	var ln net.Listener
	if err := topo.node.Do(func() (err error) {
		ln, err = net.Listen("tcp4", relayAddr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() { relayLoop(ctx, &wg, ln, upstream) })
	file := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, file); err != nil {
		t.Fatal(err)
	}
	return file
}

// relayLoop accepts until ln is closed; each connection is joined to
// upstream until either side closes or ctx ends.
func relayLoop(ctx context.Context, wg *sync.WaitGroup, ln net.Listener, upstream string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		wg.Go(func() { relayConn(ctx, c, upstream) })
	}
}

func relayConn(ctx context.Context, c net.Conn, upstream string) {
	defer c.Close()
	var d net.Dialer
	u, err := d.DialContext(ctx, "tcp4", upstream)
	if err != nil {
		return
	}
	defer u.Close()
	stop := context.AfterFunc(ctx, func() { c.Close(); u.Close() })
	defer stop()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(u, c); u.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, u); c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	<-done
	<-done
}

// cgroups are the benchmark's cgroups, for the socket LB: svcproxy
// attaches its programs to one of them, where the client is born (clone3
// CLONE_INTO_CGROUP). They are made in the machine's cgroup2 mount
// (netnstest.Cgroup2), named svcp-kpbench-*, so the benchmark adds no
// mount a lab coming up beside it would see.
type cgroups struct {
	mount string
}

// newCgroups finds the cgroup2 mount the benchmark's cgroups go in.
func newCgroups(t testing.TB) *cgroups {
	t.Helper()
	return &cgroups{mount: netnstest.Cgroup2(t)}
}

// make makes a new cgroup, removed at t's cleanup (after what ran in it),
// and returns its path and the directory open for CLONE_INTO_CGROUP.
func (c *cgroups) make(t testing.TB) (string, *os.File) {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	path := filepath.Join(c.mount, "svcp-kpbench-"+hex.EncodeToString(b[:]))
	dir, err := netnstest.MakeCgroup(t, path)
	if err != nil {
		t.Fatalf("make cgroup: %v", err)
	}
	return path, dir
}
