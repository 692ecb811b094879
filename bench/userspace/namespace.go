package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/svcproxy/svcproxy/internal/nsenter"
)

// clientIP is the client namespace's address; the node is backendIP.
const clientIP = "198.19.0.2"

// namespace is the client's network namespace: wrk and the Go load run there,
// so that every path crosses the same veth link into the node namespace,
// where the backends and the proxies run.
type namespace struct {
	Name  string
	dials chan dialRequest // served by one thread that stays in the namespace
}

type dialRequest struct {
	network, addr string
	reply         chan dialReply
}

type dialReply struct {
	c   net.Conn
	err error
}

// newClientNamespace makes the client namespace and its link to the node
// namespace (the one this process runs in), and routes the service range to
// the node. remove deletes it.
func newClientNamespace() (*namespace, error) {
	name := fmt.Sprintf("svcp-bench-client-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %w: %s", name, err, out)
	}
	n := &namespace{Name: name, dials: make(chan dialRequest)}
	for _, args := range [][]string{
		{"ip", "link", "add", "to-client", "type", "veth", "peer", "name", "eth0", "netns", name},
		{"ip", "addr", "add", backendIP + "/24", "dev", "to-client"},
		{"ip", "link", "set", "to-client", "up"},
		{"ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"},
		{"ip", "netns", "exec", name, "ip", "addr", "add", clientIP + "/24", "dev", "eth0"},
		{"ip", "netns", "exec", name, "ip", "link", "set", "eth0", "up"},
		{"ip", "netns", "exec", name, "ip", "route", "add", "198.18.0.0/16", "via", backendIP},
		{"ip", "netns", "exec", name, "sysctl", "-qw", "net.ipv4.ip_local_port_range=1024 65535"},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			n.remove()
			return nil, fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	// Entering a namespace takes a thread of its own (nsenter.Run); one
	// thread per socket would measure thread creation, not the paths. Sockets
	// made inside stay there, so one thread makes them all.
	go nsenter.Run(filepath.Join("/run/netns", name), func() error {
		for r := range n.dials {
			c, err := net.DialTimeout(r.network, r.addr, 5*time.Second)
			r.reply <- dialReply{c, err}
		}
		return nil
	})
	return n, nil
}

func (n *namespace) remove() {
	close(n.dials)
	exec.Command("ip", "netns", "del", n.Name).Run()
}

func (n *namespace) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// dial connects from inside the namespace.
func (n *namespace) dial(network, addr string) (net.Conn, error) {
	reply := make(chan dialReply, 1)
	n.dials <- dialRequest{network, addr, reply}
	r := <-reply
	return r.c, r.err
}

// udpReceiveErrors is the node namespace's count of UDP datagrams dropped
// because a socket's receive buffer was full (RcvbufErrors in /proc/net/snmp).
func udpReceiveErrors() (uint64, error) {
	b, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		return 0, err
	}
	var names []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "Udp:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for i, name := range names {
			if name == "RcvbufErrors" && i < len(f) {
				return strconv.ParseUint(f[i], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("no Udp RcvbufErrors in /proc/net/snmp")
}
