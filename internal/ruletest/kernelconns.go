package ruletest

import (
	"context"
	"testing"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/internal/offloadtest"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// KernelEstablishedSurvive: an established TCP connection is left alone when
// its endpoint turns not ready, leaves the slice, or its Service is deleted:
// the endpoint is no longer picked, and conntrack carries the connection on.
func KernelEstablishedSurvive(t *testing.T, path KernelPath) {
	l := NewLab(t, path)
	l.ServeEcho(t, 9090)
	r := l.Mode(t, Options{})
	all := func() *service.Snapshot { return st.Snapshot(st.Service("web", "198.18.0.10", 80, l.Endpoints(9090))) }
	without := func(backend string, change func(eps []service.Endpoint, i int) []service.Endpoint) *service.Snapshot {
		eps := l.Endpoints(9090)
		i := int(backend[1] - '0')
		return st.Snapshot(st.Service("web", "198.18.0.10", 80, change(eps, i)))
	}
	for _, tt := range []struct {
		name string
		snap func(backend string) *service.Snapshot
	}{
		{"endpoint not ready", func(b string) *service.Snapshot {
			return without(b, func(eps []service.Endpoint, i int) []service.Endpoint { eps[i].Ready = false; return eps })
		}},
		{"endpoint left the slice", func(b string) *service.Snapshot {
			return without(b, func(eps []service.Endpoint, i int) []service.Endpoint { return append(eps[:i], eps[i+1:]...) })
		}},
		{"service deleted", func(string) *service.Snapshot { return st.Snapshot() }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l.Sync(t, r, all())
			c, backend := l.DialEcho(t, "198.18.0.10:80")
			defer c.Close()
			l.Sync(t, r, tt.snap(backend))
			if err := offloadtest.EchoLine(c, "still here"); err != nil {
				t.Errorf("the connection to %s after %s: %v", backend, tt.name, err)
			}
		})
	}
}

// KernelHairpin: a backend that reaches its own Service and lands on itself
// must see the node as the client (the path masquerades hairpin traffic after
// DNAT), or it would answer itself and the connection would fail; when it
// lands on another backend, that one sees its address: only hairpin traffic
// is masqueraded.
func KernelHairpin(t *testing.T, path KernelPath) {
	l := NewLab(t, path)
	l.ServeTCP(t, 8080)
	l.Sync(t, l.Mode(t, Options{}), l.Web())
	answers, err := offloadtest.Dial(l.Backends[0], "198.18.0.10:80", 30)
	if err != nil {
		t.Fatal(err)
	}
	self := 0
	for _, a := range answers {
		want := offloadtest.BackendAddr(0).String()
		if a.Backend == "b0" {
			want, self = "198.19.11.1", self+1 // the node's address on b0's link
		}
		if a.Client != want {
			t.Errorf("backend %s saw client %s, want %s", a.Backend, a.Client, want)
		}
	}
	// Each connection lands on b0 with probability 1/3: none in 30 has
	// probability ~5e-6.
	if self == 0 {
		t.Errorf("no connection of 30 landed on b0 itself: %v", answers)
	}
}

// KernelConnections: hybrid mode samples each promoted port's new
// connections from the kernel's counters (Options.CountConnections), and a
// rewrite of the port's rules does not reset them.
func KernelConnections(t *testing.T, path KernelPath) {
	l := NewLab(t, path)
	l.ServeTCP(t, 8080)
	r := l.Mode(t, Options{CountConnections: true})
	l.Sync(t, r, l.Web())
	web := l.Web().Ports()[0].Name
	count := func() uint64 {
		t.Helper()
		var got map[service.PortName]uint64
		if err := l.Node.Do(func() (err error) {
			got, err = r.Connections(context.Background(), nil, dataplane.PortSet{web: true})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return got[web]
	}
	if _, err := offloadtest.Dial(l.Client, "198.18.0.10:80", 5); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 5 {
		t.Errorf("after 5 connections: %d", n)
	}
	l.Sync(t, r, st.Snapshot(st.Service("web", "198.18.0.10", 80, l.Endpoints(8080)[:2]))) // the port's rules are rewritten
	if _, err := offloadtest.Dial(l.Client, "198.18.0.10:80", 3); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 8 {
		t.Errorf("after a rewrite and 3 more connections: %d, want 8", n)
	}
}
