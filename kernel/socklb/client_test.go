package socklb

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// dialEnv makes the test binary a client instead (see TestMain): it talks to
// the address in the way modeEnv says, prints a line and exits. Tests run it
// as a child process inside their cgroup, or outside it: the hooks see only
// sockets created inside.
const (
	dialEnv  = "SOCKLB_TEST_DIAL"
	countEnv = "SOCKLB_TEST_COUNT" // how many times; 1 when unset, below 0 until stdin closes
	modeEnv  = "SOCKLB_TEST_MODE"  // a key of clients; "tcp" when unset
)

// clients are the client modes, each returning the line to print.
var clients = map[string]func(addr string) (string, error){
	// tcp: connect, print the line the server sends.
	"tcp": tcpLine,
	// udp: a connected UDP socket (connect4/6); "REPLY from SOURCE", the
	// source as recvmsg reports it.
	"udp": func(addr string) (string, error) { return udpExchange("udp", addr, true) },
	// udp-unconnected: sendto() and recvfrom() on an unconnected socket of
	// the address's family (sendmsg4/6, recvmsg4/6).
	"udp-unconnected": func(addr string) (string, error) { return udpExchange("", addr, false) },
	// udp-dualstack: the same on an IPv6 socket that sends to an IPv4
	// address as ::ffff:a.b.c.d (sendmsg6 and recvmsg6 on a mapped address;
	// Go makes a wildcard "udp" socket dual-stack, IPV6_V6ONLY off).
	"udp-dualstack": func(addr string) (string, error) { return udpExchange("udp", addr, false) },
	// peer-tcp, peer-udp: a connected socket; "REPLY peer PEER", the peer
	// as getpeername(2) reports it (getpeername4/6).
	"peer-tcp": func(addr string) (string, error) { return peerExchange("tcp", addr) },
	"peer-udp": func(addr string) (string, error) { return peerExchange("udp", addr) },
}

func TestMain(m *testing.M) {
	if addr := os.Getenv(dialEnv); addr != "" {
		n, _ := strconv.Atoi(os.Getenv(countEnv))
		mode := os.Getenv(modeEnv)
		if mode == "" {
			mode = "tcp"
		}
		client := clients[mode]
		if client == nil {
			fmt.Fprintf(os.Stderr, "%s=%q: no such client\n", modeEnv, mode)
			os.Exit(2)
		}
		// A count below 0: until stdin is closed (the test says when).
		var stop atomic.Bool
		if n < 0 {
			go func() { _, _ = io.Copy(io.Discard, os.Stdin); stop.Store(true) }()
			n = math.MaxInt
		}
		for i := 0; i < max(n, 1) && !stop.Load(); i++ {
			line, err := client(addr)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			fmt.Println(line)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func tcpLine(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", err
	}
	return line[:len(line)-1], nil
}

// udpExchange sends "ping" to addr and returns "REPLY from SOURCE". network
// "" is the address's own family ("udp4" or "udp6").
func udpExchange(network, addr string, connected bool) (string, error) {
	dst, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return "", err
	}
	if network == "" {
		network = "udp6"
		if dst.IP.To4() != nil {
			network = "udp4"
		}
	}
	var c *net.UDPConn
	if connected {
		c, err = net.DialUDP(network, nil, dst)
	} else {
		c, err = net.ListenUDP(network, nil)
	}
	if err != nil {
		return "", err
	}
	defer c.Close()
	if connected {
		_, err = c.Write([]byte("ping"))
	} else {
		_, err = c.WriteToUDP([]byte("ping"), dst)
	}
	if err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 512)
	n, src, err := c.ReadFromUDPAddrPort(buf)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s from %s", buf[:n], netip.AddrPortFrom(src.Addr().Unmap(), src.Port())), nil
}

// peerExchange connects to addr, reads the server's reply (sending "ping"
// first over UDP) and returns "REPLY peer PEER", PEER from getpeername(2) on
// the socket itself (Go's RemoteAddr comes from it too, but calling it here
// leaves no doubt about which system call answered).
func peerExchange(network, addr string) (string, error) {
	c, err := net.DialTimeout(network, addr, 10*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if network == "udp" {
		if _, err := c.Write([]byte("ping")); err != nil {
			return "", err
		}
	}
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		return "", err
	}
	raw, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		return "", err
	}
	var sa unix.Sockaddr
	var serr error
	if err := raw.Control(func(fd uintptr) { sa, serr = unix.Getpeername(int(fd)) }); err != nil {
		return "", err
	}
	if serr != nil {
		return "", fmt.Errorf("getpeername: %w", serr)
	}
	var peer netip.AddrPort
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		peer = netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
	case *unix.SockaddrInet6:
		peer = netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), uint16(sa.Port))
	}
	return fmt.Sprintf("%s peer %s", strings.TrimSpace(string(buf[:n])), peer), nil
}
