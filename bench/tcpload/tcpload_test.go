package tcpload

import (
	"net"
	"testing"
	"time"
)

// TestLoads runs both loads and Who against Serve on loopback.
func TestLoads(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go Serve(ln)
	dst := ln.Addr().String()

	if n, err := NewConnections(dst, 5); n != 5 || err != nil {
		t.Errorf("NewConnections(5) = %d, %v", n, err)
	}
	conns, err := Dial(dst, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	if n, err := KeepAlive(conns, 20*time.Millisecond); n == 0 || err != nil {
		t.Errorf("KeepAlive = %d, %v; want some requests", n, err)
	}
	got, err := Who(func() (net.Conn, error) { return net.Dial("tcp4", dst) })
	if err != nil || got != dst {
		t.Errorf("Who = %q, %v; want %q", got, err, dst)
	}
}

func TestParseCounters(t *testing.T) {
	text := "Tcp: RtoAlgorithm MaxConn OutRsts\nTcp: 1 -1 7\nUdp: InDatagrams\nUdp: 3\n"
	m, err := parseCounters(text, "Tcp", "snmp")
	if err != nil || m["OutRsts"] != 7 || m["MaxConn"] != -1 {
		t.Errorf("parseCounters = %v, %v", m, err)
	}
	if _, err := parseCounters(text, "TcpExt", "netstat"); err == nil {
		t.Error("no TcpExt lines: want an error")
	}
	if d := (TCPStats{5, 9}).Sub(TCPStats{2, 4}); d != (TCPStats{3, 5}) {
		t.Errorf("Sub = %+v", d)
	}
}
