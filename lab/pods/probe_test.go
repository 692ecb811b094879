package pods

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseTarget(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{in: "web", want: "http://web:80"},
		{in: "web.default.svc.cluster.local", want: "http://web.default.svc.cluster.local:80"},
		{in: "198.18.0.20:80", want: "http://198.18.0.20:80"},
		{in: "http://web:8080/", want: "http://web:8080"},
		{in: "tcp://web:81", want: "http://web:81"},
		{in: "udp://echo:7", want: "udp://echo:7"},
		{in: "udp://echo", want: "udp://echo:7"},
		{in: "198.19.0.1:30080", want: "http://198.19.0.1:30080"},
		{in: "sctp://x:1", err: `scheme "sctp": want http, tcp or udp`},
		{in: "web:0", err: `port "0": want 1 to 65535`},
		{in: "web:http", err: `port "http"`},
		{in: "", err: `host "": want a name or an IP address`},
		{in: "http://a/b", err: `host "a/b"`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseTarget(tt.in)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got.String())
		})
	}
}

func TestParseAnswer(t *testing.T) {
	a, err := ParseAnswer("web-0: you came from 198.19.1.2:40312\n")
	require.NoError(t, err)
	require.Equal(t, Answer{Pod: "web-0", From: "198.19.1.2:40312"}, a)
	require.Equal(t, "web-0: you came from 198.19.1.2:40312", a.String())
	for _, bad := range []string{"", "hello", "web 0: you came from 1.2.3.4:5", "web-0: you came from nowhere"} {
		_, err := ParseAnswer(bad)
		require.Error(t, err, bad)
	}
}

// startPod runs a Pod server on loopback ports and returns them.
func startPod(t *testing.T, name string) (tcp, udp uint16) {
	t.Helper()
	tcp, udp = freePort(t, "tcp"), freePort(t, "udp")
	ready := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	p := &Pod{Name: name, Host: "127.0.0.1", TCP: []uint16{tcp}, UDP: []uint16{udp}, Ready: func() { close(ready) }}
	go func() { done <- p.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("pod: %v", err)
	}
	return tcp, udp
}

// freePort asks the kernel for a free loopback port. Another test could take
// it before the pod binds it; then the pod fails to start and says so.
func freePort(t *testing.T, network string) uint16 {
	t.Helper()
	if network == "udp" {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		require.NoError(t, err)
		defer c.Close()
		return uint16(c.LocalAddr().(*net.UDPAddr).Port)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return uint16(l.Addr().(*net.TCPAddr).Port)
}

func TestProbeAgainstPod(t *testing.T) {
	tcp, udp := startPod(t, "web-0")
	for _, target := range []string{
		fmt.Sprintf("127.0.0.1:%d", tcp),
		fmt.Sprintf("udp://127.0.0.1:%d", udp),
		fmt.Sprintf("localhost:%d", tcp), // a name: resolved once
	} {
		t.Run(target, func(t *testing.T) {
			tg, err := ParseTarget(target)
			require.NoError(t, err)
			var out strings.Builder
			require.NoError(t, (&Probe{Target: tg, N: 3}).Run(context.Background(), &out))
			tl := &Tally{}
			sc := bufio.NewScanner(strings.NewReader(out.String()))
			for sc.Scan() {
				var ev Event
				require.NoError(t, json.Unmarshal(sc.Bytes(), &ev), sc.Text())
				tl.Add(ev)
			}
			require.Equal(t, 3, tl.Total)
			require.Zero(t, tl.Failed, tl.Errors)
			require.Len(t, tl.Pods, 1)
			require.Equal(t, "web-0", tl.Pods[0].Pod)
			require.Equal(t, "127.0.0.1", tl.Sources()[0].String())
			require.True(t, strings.HasPrefix(tl.Addr, "127.0.0.1:"), tl.Addr)
		})
	}
}

func TestProbeFailures(t *testing.T) {
	tcp := freePort(t, "tcp") // nothing listens there
	tg, err := ParseTarget(fmt.Sprintf("127.0.0.1:%d", tcp))
	require.NoError(t, err)
	var out strings.Builder
	require.NoError(t, (&Probe{Target: tg, N: 2}).Run(context.Background(), &out))
	require.Equal(t, 3, strings.Count(out.String(), "\n"))
	require.Contains(t, out.String(), "connection refused")
}

// A request that times out says which side of the connection it fell on: a
// pod that accepts and never answers is "connected ..., no answer", with the
// client's port to look for in conntrack; and a new TCP connection gets twice
// the timeout (tcpTimeout), room for the kernel's SYN retransmissions.
func TestProbeTimeoutSaysWhere(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	tg, err := ParseTarget(ln.Addr().String())
	require.NoError(t, err)
	p := &Probe{Target: tg, N: 1, Timeout: 200 * time.Millisecond}
	require.Equal(t, 400*time.Millisecond, p.tcpTimeout())
	_, err = p.once(context.Background(), ln.Addr().String())
	require.Error(t, err)
	require.Contains(t, err.Error(), "context deadline exceeded (connected from 127.0.0.1:")
	require.Contains(t, err.Error(), ", no answer)")
}

// A datagram that got no answer in time is sent once more on the same socket;
// a refusal (nobody listens) is an answer, not sent again.
func TestUDPOnceSendsAgain(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	defer pc.Close()
	got := make(chan int, 1)
	go func() { // drop the first datagram, answer the second
		buf := make([]byte, 64)
		for i := 1; ; i++ {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				got <- i - 1
				return
			}
			if i == 2 {
				_, _ = pc.WriteTo([]byte("web-0"+answerSep+from.String()+"\n"), from)
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := udpOnce(ctx, pc.LocalAddr().String(), 100*time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, "web-0", a.Pod)
	pc.Close()
	require.Equal(t, 2, <-got, "datagrams the server read")

	_, err = udpOnce(ctx, pc.LocalAddr().String(), 5*time.Second) // closed now: refused
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
}
