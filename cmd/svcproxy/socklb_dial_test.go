package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/netnstest"
)

// The socket-LB tests' clients: the test binary run as a process born in a
// cgroup (TestHelperDial), dialing TCP or exchanging UDP datagrams.

// dial is one connection of TestHelperDial: what the backend said (its name
// and the client it saw), the socket's peer address, or the error ("refused"
// for ECONNREFUSED).
type dial struct{ backend, client, peer, err string }

// dialFromCgroup runs this test binary as TestHelperDial in ns, born inside cg
// (clone3 with CLONE_INTO_CGROUP, so its socket is the hook's from the start;
// outside any cgroup of the test's when cg is nil), and returns its n dials.
func dialFromCgroup(t *testing.T, ns *netnstest.NS, cg *testCgroup, addr string, n int) []dial {
	t.Helper()
	return dialsFrom(t, ns, cg, addr, n)
}

// dialUDPFromCgroup is dialFromCgroup with a UDP exchange (udpOnce) per dial.
func dialUDPFromCgroup(t *testing.T, ns *netnstest.NS, cg *testCgroup, addr string, n int) []dial {
	t.Helper()
	return dialsFrom(t, ns, cg, addr, n, "SVCPROXY_DIAL_UDP=1")
}

func dialsFrom(t *testing.T, ns *netnstest.NS, cg *testCgroup, addr string, n int, env ...string) []dial {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := ns.Command(ctx, os.Args[0], "-test.run=^TestHelperDial$")
	cmd.Env = append(append(os.Environ(), "SVCPROXY_DIAL="+addr, "SVCPROXY_DIAL_COUNT="+strconv.Itoa(n)), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if cg != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.dir.Fd())}
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("client dialing %s: %v: %s", addr, err, stderr.String())
	}
	var dials []dial
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "error":
			dials = append(dials, dial{err: f[1]})
		case len(f) == 3:
			dials = append(dials, dial{backend: f[0], client: f[1], peer: f[2]})
		case len(f) == 2: // an echo server's greeting: its name only
			dials = append(dials, dial{backend: f[0], peer: f[1]})
		default:
			t.Fatalf("client dialing %s said %q", addr, line)
		}
	}
	if len(dials) != n {
		t.Fatalf("client dialing %s: %d answers, want %d: %s", addr, len(dials), n, out)
	}
	return dials
}

// TestHelperDial is not a test: dialFromCgroup runs the test binary as a
// client, which connects to $SVCPROXY_DIAL $SVCPROXY_DIAL_COUNT times (or,
// for startDialing, every 10 ms until the file $SVCPROXY_DIAL_UNTIL exists,
// or every what the file $SVCPROXY_DIAL_PACE says when it holds a duration)
// and prints a line each: "<backend> <client it saw> <peer address>", or
// "error refused" / "error <what>".
func TestHelperDial(t *testing.T) {
	addr := os.Getenv("SVCPROXY_DIAL")
	if addr == "" {
		t.Skip("the client process of TestSocketLBMode")
	}
	if until := os.Getenv("SVCPROXY_DIAL_UNTIL"); until != "" {
		// startDialing: every 10 ms (or as paced) until the file exists.
		for {
			if _, err := os.Stat(until); err == nil {
				os.Exit(0)
			}
			fmt.Println(dialOnce(addr))
			every := 10 * time.Millisecond
			if b, err := os.ReadFile(os.Getenv("SVCPROXY_DIAL_PACE")); err == nil {
				if d, err := time.ParseDuration(strings.TrimSpace(string(b))); err == nil {
					every = d
				}
			}
			time.Sleep(every)
		}
	}
	n, _ := strconv.Atoi(os.Getenv("SVCPROXY_DIAL_COUNT"))
	for range max(n, 1) {
		fmt.Println(dialOnce(addr))
	}
	os.Exit(0)
}

func dialOnce(addr string) string {
	if os.Getenv("SVCPROXY_DIAL_UDP") != "" {
		return udpOnce(addr)
	}
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "error refused"
	case err != nil:
		return "error " + strings.ReplaceAll(err.Error(), " ", "_")
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "error read:" + strings.ReplaceAll(err.Error(), " ", "_")
	}
	return strings.TrimSpace(line) + " " + c.RemoteAddr().String()
}

// udpOnce sends one datagram from a new unconnected UDP socket to addr
// (sendto: the sendmsg hook) and reads the answer (recvfrom: the recvmsg
// hook): "<backend> udp <where it came from>", or "error <what>". An
// untranslated datagram to the pod's own ClusterIP finds no listener, and an
// unconnected socket hears no ICMP: a timeout.
func udpOnce(addr string) string {
	to, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return "error resolve"
	}
	network := "udp4"
	if to.IP.To4() == nil {
		network = "udp6"
	}
	pc, err := net.ListenUDP(network, nil)
	if err != nil {
		return "error listen"
	}
	defer pc.Close()
	_ = pc.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := pc.WriteToUDP([]byte("who"), to); err != nil {
		return "error send:" + strings.ReplaceAll(err.Error(), " ", "_")
	}
	buf := make([]byte, 512)
	n, from, err := pc.ReadFromUDP(buf)
	if err != nil {
		return "error timeout"
	}
	backend, _, _ := strings.Cut(string(buf[:n]), " ")
	return backend + " udp " + from.String()
}
