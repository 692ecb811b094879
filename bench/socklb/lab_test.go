package socklb

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/bench/tcpload"
	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/internal/netnstest"
	knft "github.com/svcproxy/svcproxy/kernel/nftables"
	ksocklb "github.com/svcproxy/svcproxy/kernel/socklb"
	"github.com/svcproxy/svcproxy/offload/kernelsync"
	nftoffload "github.com/svcproxy/svcproxy/offload/nftables"
	"github.com/svcproxy/svcproxy/service"
)

// The addresses (doc.go draws them). Each pod has two links: one through
// the node without a table, where the direct and socket-LB rows go, one
// through the node with the nftables table, where the nftables row goes, so
// the table stays in place for the whole run and the rows can alternate
// every few milliseconds. Each row has its own port on the server, so no two
// rows ever share a 4-tuple: a row never meets another's TIME_WAIT sockets
// (bench/iptables found what that costs: rowPorts).
var (
	clientPod    = netip.MustParsePrefix("198.19.20.2/24") // to the plain node
	serverPod    = netip.MustParsePrefix("198.19.21.2/24")
	clientPodNFT = netip.MustParsePrefix("198.19.22.2/24") // to the nftables node
	serverPodNFT = netip.MustParsePrefix("198.19.23.2/24")
	vip          = netip.MustParseAddr("198.18.0.10")
)

const (
	directPort   = 8080
	socklbPort   = 8081 // the socket LB's Service, vip:80, goes here
	nftablesPort = 8082 // the nftables Service, vip:81, goes here
	hookedPort   = 8083 // direct, from the socket LB's cgroup
)

// lab is the benchmark's topology: four namespaces, two cgroups, the socket
// LB attached to one of them, the nftables table in one node.
type lab struct {
	node, nftNode, client, server *netnstest.NS
	lb, plain                     *cgroup
}

// newLab builds the topology and starts the server; everything it makes is
// removed at b's cleanup, in reverse order: the programs first, then the
// bpffs, the cgroups and their mount, the namespaces.
func newLab(b *testing.B) *lab {
	b.Helper()
	netnstest.RequireRoot(b, "nft", "sysctl")
	l := &lab{node: netnstest.New(b), nftNode: netnstest.New(b), client: netnstest.New(b), server: netnstest.New(b)}
	for _, n := range []*netnstest.NS{l.node, l.nftNode} {
		n.Sysctl(b, "net.ipv4.ip_forward", "1")
		n.Sysctl(b, "net.ipv4.conf.all.send_redirects", "0")
	}
	netnstest.Veth(b, l.node, "to-client", gateway(clientPod), l.client, "eth0", clientPod)
	netnstest.Veth(b, l.node, "to-server", gateway(serverPod), l.server, "eth0", serverPod)
	netnstest.Veth(b, l.nftNode, "to-client", gateway(clientPodNFT), l.client, "eth1", clientPodNFT)
	netnstest.Veth(b, l.nftNode, "to-server", gateway(serverPodNFT), l.server, "eth1", serverPodNFT)
	l.client.Run(b, "ip", "route", "add", "default", "via", gateway(clientPod).Addr().String())
	l.server.Run(b, "ip", "route", "add", "default", "via", gateway(serverPod).Addr().String())
	// Service addresses go to the nftables node; the replies to its side of
	// the client come back the same way, so its conntrack sees both.
	l.client.Run(b, "ip", "route", "add", "198.18.0.0/16", "via", gateway(clientPodNFT).Addr().String())
	l.server.Run(b, "ip", "route", "add", clientPodNFT.Masked().String(), "via", gateway(serverPodNFT).Addr().String())
	// 64,512 ports per destination: a row's connections of a run never
	// wait for a port (TIME_WAIT lasts 60 s).
	l.client.Sysctl(b, "net.ipv4.ip_local_port_range", "1024 65535")
	for _, port := range []int{directPort, socklbPort, nftablesPort, hookedPort} {
		serve(b, l.server, port)
	}
	l.installNFT(b)

	root := netnstest.Cgroup2(b) // the machine's: no second mount a lab would see
	base := newCgroup(b, root, "svcp-socklb-bench-"+randomHex())
	l.lb, l.plain = newCgroup(b, base.path, "lb"), newCgroup(b, base.path, "plain")

	cfg := ksocklb.Config{CgroupPath: l.lb.path, PinPath: mountFS(b, "bpf")}
	k, err := ksocklb.New(cfg)
	if err != nil {
		b.Skipf("socklb.New (the kernel refuses the socket LB's programs?): %v", err)
	}
	b.Cleanup(func() {
		if err := errors.Join(k.Close(), ksocklb.Cleanup(cfg)); err != nil {
			b.Errorf("detach and unpin the socket LB: %v", err)
		}
	})
	backend := netip.AddrPortFrom(serverPod.Addr(), socklbPort)
	svc := ksocklb.Service{VIP: vip, Port: 80, Protocol: ksocklb.TCP}
	if err := k.SetService(context.Background(), svc, ksocklb.Entry{Backends: []netip.AddrPort{backend}}); err != nil {
		b.Fatal(err)
	}
	return l
}

// gateway is the node's end of a pod's link: .1 of the pod's subnet.
func gateway(pod netip.Prefix) netip.Prefix {
	return netip.PrefixFrom(pod.Masked().Addr().Next(), pod.Bits())
}

func randomHex() string {
	var r [4]byte
	_, _ = rand.Read(r[:])
	return hex.EncodeToString(r[:])
}

// serve answers every connection to port in ns (tcpload.Answer) until cleanup.
func serve(b *testing.B, ns *netnstest.NS, port int) {
	b.Helper()
	var ln net.Listener
	if err := ns.Do(func() (err error) {
		ln, err = net.Listen("tcp4", fmt.Sprintf(":%d", port))
		return err
	}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() }) // ends tcpload.Serve
	go tcpload.Serve(ln)
}

// mountFS mounts a filesystem of the benchmark's own (fstype "bpf": a new,
// empty bpffs whose pins go with it) on a new directory and unmounts it at
// cleanup.
func mountFS(b *testing.B, fstype string) string {
	b.Helper()
	dir := b.TempDir()
	if err := unix.Mount("none", dir, fstype, 0, ""); err != nil {
		b.Skipf("mount -t %s refused: %v", fstype, err)
	}
	b.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			b.Errorf("unmount %s at %s: %v", fstype, dir, err)
		}
	})
	return dir
}

// cgroup is a cgroup v2 directory the benchmark made, open for
// CLONE_INTO_CGROUP.
type cgroup struct {
	path string
	dir  *os.File
}

// newCgroup makes parent/name; it is removed at cleanup, once the clients
// that ran in it are gone.
func newCgroup(b *testing.B, parent, name string) *cgroup {
	b.Helper()
	path := filepath.Join(parent, name)
	dir, err := netnstest.MakeCgroup(b, path)
	if err != nil {
		b.Fatalf("make cgroup: %v", err)
	}
	return &cgroup{path: path, dir: dir}
}

// client is one row's client (client_test.go): this test binary, running
// in the client pod, born in its row's cgroup, measuring a slice of load
// per command.
type client struct {
	name   string
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr bytes.Buffer
}

// startClient starts the client of a row that connects to dst, in cg; it
// exits when its stdin is closed, at cleanup.
func (l *lab) startClient(b *testing.B, name string, cg *cgroup, dst string) *client {
	b.Helper()
	c := &client{name: name}
	c.cmd = l.client.Command(context.Background(), os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(), clientEnv+"=1", dstEnv+"="+dst, fmt.Sprintf("%s=%d", workersEnv, *workers))
	// clone3(CLONE_INTO_CGROUP): `ip netns exec` is born in the cgroup and
	// execs the client there, so every socket it makes is the cgroup's.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.dir.Fd())}
	c.cmd.Stderr = &c.stderr
	var err error
	if c.in, err = c.cmd.StdinPipe(); err != nil {
		b.Fatal(err)
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	c.out = bufio.NewReader(stdout)
	if err := c.cmd.Start(); err != nil {
		b.Fatalf("start the %s client: %v", name, err)
	}
	b.Cleanup(func() {
		c.in.Close()
		done := make(chan error, 1)
		go func() { done <- c.cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				b.Errorf("the %s client: %v: %s", name, err, c.stderr.String())
			}
		case <-time.After(30 * time.Second):
			_ = c.cmd.Process.Kill()
			b.Errorf("the %s client did not exit within 30 s of its stdin closing", name)
			<-done
		}
	})
	return c
}

// do sends the client one command ("conn N", "keepalive D") and returns
// what it measured.
func (c *client) do(b *testing.B, command string) clientResult {
	b.Helper()
	if _, err := fmt.Fprintln(c.in, command); err != nil {
		b.Fatalf("the %s client: %s: %v: %s", c.name, command, err, c.stderr.String())
	}
	line, err := c.out.ReadBytes('\n')
	if err != nil {
		b.Fatalf("the %s client: %s: %v: %s", c.name, command, err, c.stderr.String())
	}
	var r clientResult
	if err := json.Unmarshal(line, &r); err != nil || r.Ops == 0 || r.Seconds <= 0 {
		b.Fatalf("the %s client: %s: %q: want a result with ops and seconds (%v)", c.name, command, line, err)
	}
	return r
}

// installNFT puts kube-proxy's nftables layout (offload/nftables) for one
// Service, vip:81 to the server's nftablesPort, in the nftables node: DNAT
// in prerouting, connection tracking on every packet.
func (l *lab) installNFT(b *testing.B) {
	b.Helper()
	s := &service.Service{NamespacedName: service.NamespacedName{Namespace: "bench", Name: "web"},
		Type: service.TypeClusterIP, ClusterIPs: []netip.Addr{vip}}
	s.Ports = []*service.Port{{
		Name:    service.PortName{NamespacedName: s.NamespacedName, Port: "nftables", Protocol: service.TCP},
		Service: s, Port: 81, Protocol: service.TCP,
		Endpoints: []service.Endpoint{{Addr: netip.AddrPortFrom(serverPodNFT.Addr(), nftablesPort), Ready: true, Serving: true}},
	}}
	var nft knft.Interface
	if err := l.nftNode.Do(func() (err error) { nft, err = knft.New(nftoffload.Table); return err }); err != nil {
		b.Fatal(err)
	}
	// SyncPeriod: an hour, so no periodic check of the table runs meanwhile.
	p, err := nftoffload.New(nftoffload.Config{Node: dataplane.Node{NodeName: "node-a"}, NFT: nft, Periods: kernelsync.Periods{SyncPeriod: time.Hour}})
	if err != nil {
		b.Fatal(err)
	}
	if err := l.nftNode.Do(func() error { return p.Sync(context.Background(), service.NewSnapshot([]*service.Service{s}, nil)) }); err != nil {
		b.Fatal(err)
	}
}
