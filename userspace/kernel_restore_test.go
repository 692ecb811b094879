package userspace

import (
	"context"
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/service"
)

// TestKernelPortalChanges follows Services created, changed and deleted
// through the real iptables, where each sync writes only the rules that
// changed: after every step, traffic goes where the Services say, and our
// chains hold the same rules as a full restore of the same portals writes
// in a namespace of its own (the order of the portals aside).
func TestKernelPortalChanges(t *testing.T) {
	l := newLab(t)
	fresh := netnstest.New(t) // where each step's full restore is written
	saved := func(ns *netnstest.NS) []string {
		return ourRules(ns.Run(t, "iptables-save", "-t", "filter") + ns.Run(t, "iptables-save", "-t", "nat"))
	}
	extra := svcSpec{name: "default/extra", port: "http", clusterIP: "198.18.0.40", svcPort: 80, endpoints: []string{epB + webTargetPort}}
	noEndpoints := extra
	noEndpoints.endpoints = nil

	steps := []struct {
		name  string
		specs []svcSpec
		check func(t *testing.T)
	}{
		{"three Services", []svcSpec{web(epA), dns(epA), echoSvc(epB)}, func(t *testing.T) {
			if got := hello(t, l.client, webVIP+":80"); got != "a" {
				t.Errorf("web: got %q, want a", got)
			}
		}},
		{"a Service created", []svcSpec{web(epA), dns(epA), echoSvc(epB), extra}, func(t *testing.T) {
			if got := hello(t, l.client, "198.18.0.40:80"); got != "b" {
				t.Errorf("the new Service: got %q, want b", got)
			}
		}},
		{"a Service deleted", []svcSpec{dns(epA), echoSvc(epB), extra}, func(t *testing.T) {
			if rules := l.node.Run(t, "iptables-save", "-t", "nat"); strings.Contains(rules, "default/web:http") {
				t.Errorf("the deleted Service's portals are left:\n%s", rules)
			}
		}},
		{"its endpoints gone: refused", []svcSpec{dns(epA), echoSvc(epB), noEndpoints}, func(t *testing.T) {
			c, err := dial(l.client, "tcp4", "198.18.0.40:80")
			if err == nil {
				c.Close()
			}
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("connect to a Service without endpoints: %v, want connection refused", err)
			}
		}},
		{"endpoints back, a Service back", []svcSpec{web(epB), dns(epA), echoSvc(epB), extra}, func(t *testing.T) {
			for _, addr := range []string{webVIP + ":80", "198.18.0.40:80"} {
				if got := hello(t, l.client, addr); got != "b" {
					t.Errorf("%s: got %q, want b", addr, got)
				}
			}
		}},
	}
	for _, st := range steps {
		l.sync(t, st.specs...)
		st.check(t)
		full := Render(service.IPv4, portalsOf(l.p.ports, l.p.cfg))
		if err := fresh.Do(func() error { return l.ipt.Restore(context.Background(), full) }); err != nil {
			t.Fatalf("%s: the full restore: %v", st.name, err)
		}
		if got, want := saved(l.node), saved(fresh); !slices.Equal(got, want) {
			t.Errorf("%s: our chains hold\n%s\nwant, as a full restore writes them\n%s", st.name, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	if st := l.p.Status(); st.PortalsFailures != 0 {
		t.Errorf("%d failed restores (%s), want none", st.PortalsFailures, st.PortalsError)
	}
}
