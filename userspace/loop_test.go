package userspace

import (
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"testing"

	"github.com/svcproxy/svcproxy/service"
)

// limitFiles lowers this process's file limit to what is open now plus n, until
// the test ends: a proxy that loops on itself then fails fast instead of eating
// thousands of descriptors.
func limitFiles(t *testing.T, n int) {
	t.Helper()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	lim := old
	lim.Cur = min(old.Cur, uint64(openFiles(t)+n))
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
}

// TestEndpointLoopsAreRefused: an endpoint that is one of the proxier's own
// listeners is never dialled (it would accept its own connection and dial it
// again, until the descriptors run out). The port says why in Status, its
// clients are reset at once, and fixing the endpoint brings service back.
func TestEndpointLoopsAreRefused(t *testing.T) {
	limitFiles(t, 400)
	be := startTCPBackend(t, direct, "a", "127.0.0.1:0", sayName)
	other := webSpec(service.Affinity{}, be.addr.String())
	other.name, other.clusterIP = "default/other", "198.18.0.11"
	nodePort := closedPort(t).Port()

	tests := []struct {
		name string
		ep   func(web, other PortStatus) string
	}{
		{"its own listener", func(web, _ PortStatus) string { return fmt.Sprintf("127.0.0.1:%d", web.Listener) }},
		{"its own node port", func(web, _ PortStatus) string { return fmt.Sprintf("127.0.0.1:%d", web.NodePort) }},
		{"another port's listener", func(_, other PortStatus) string { return fmt.Sprintf("127.0.0.1:%d", other.Listener) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := startProxier(t, Config{})
			good := webSpec(service.Affinity{}, be.addr.String())
			good.nodePort = nodePort
			mustSync(t, p, snapshotOf(t, good, other))
			web := portStatus(t, p, "default/web:http")
			loop := good
			loop.endpoints = []string{tt.ep(web, portStatus(t, p, "default/other:http"))}
			mustSync(t, p, snapshotOf(t, loop, other))

			if s, err := readAll(t, listenerAddr(t, p, "default/web:http")); err == nil {
				t.Errorf("through the looping endpoint: read %q, want a reset", s)
			}
			var opened uint64
			for _, c := range p.Stats() {
				opened += c.ConnectionsOpened
			}
			if opened != 1 {
				t.Errorf("one client connection made the proxier accept %d: it connected to itself", opened)
			}
			if ps := portStatus(t, p, "default/web:http"); len(ps.Refused) != 1 || !strings.Contains(ps.Refused[0], "leads back to this proxy") {
				t.Errorf("Status of the port: refused %q, want the endpoint named with why", ps.Refused)
			}

			mustSync(t, p, snapshotOf(t, good, other)) // the manifest is fixed
			if s, err := readAll(t, listenerAddr(t, p, "default/web:http")); err != nil || s != "a" {
				t.Errorf("after the fix: %q, %v; want a", s, err)
			}
			if ps := portStatus(t, p, "default/web:http"); len(ps.Refused) != 0 {
				t.Errorf("after the fix: still refused %q", ps.Refused)
			}
		})
	}
}

func TestSelfAddrsCheck(t *testing.T) {
	web := portName("default/web", "http", service.TCP)
	s := &selfAddrs{
		local:     map[netip.Addr]bool{netip.MustParseAddr("198.19.0.1"): true},
		listeners: map[service.Protocol]map[uint16]service.PortName{service.TCP: {40000: web}, service.UDP: {}},
		vips:      map[service.VIP]service.PortName{{Protocol: service.TCP, Addr: ap("198.18.0.10:80")}: web},
	}
	tests := []struct {
		proto service.Protocol
		ep    string
		loop  bool
	}{
		{service.TCP, "127.0.0.1:40000", true},
		{service.TCP, "127.0.0.2:40000", true}, // all of 127/8 is local
		{service.TCP, "0.0.0.0:40000", true},
		{service.TCP, "198.19.0.1:40000", true}, // a node address
		{service.TCP, "198.18.0.10:80", true},   // the ClusterIP itself
		{service.TCP, "[::ffff:198.18.0.10]:80", true},
		{service.UDP, "127.0.0.1:40000", false}, // another protocol's port
		{service.UDP, "198.18.0.10:80", false},
		{service.TCP, "198.19.2.2:40000", false}, // a pod that happens to use the port
		{service.TCP, "198.19.0.1:8080", false},  // a host-network pod on the node
	}
	for _, tt := range tests {
		err := s.check(tt.proto, ap(tt.ep))
		if (err != nil) != tt.loop {
			t.Errorf("check(%s %s) = %v, want a loop: %v", tt.proto, tt.ep, err, tt.loop)
		}
	}
}
