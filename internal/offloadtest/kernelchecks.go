package offloadtest

import (
	"fmt"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/offload/kernelsync"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// The checks below are what every kernel mode must do, whatever its rules
// look like: each mode's tests run them on a Lab of their own, with sync
// applying a Snapshot to the node's kernel through that mode's Dataplane (in
// the node namespace) and returning the Dataplane's Health after it. They use
// the Service Web.

// Sync applies a Snapshot with a kernel mode's Dataplane on the Lab's node and
// returns its Health.
type Sync func(snap *service.Snapshot) kernelsync.Health

// Web is the Service of the checks: default/web at 198.18.0.10:80, the Lab's
// three backends on port 8080, with opts.
func (l *Lab) Web(opts ...st.Opt) *service.Snapshot {
	return st.Snapshot(st.Service("web", "198.18.0.10", 80, l.Endpoints(8080), opts...))
}

// CheckSpread: connections spread evenly over the three backends, and with no
// proxy hop: each backend sees the client's own address.
func (l *Lab) CheckSpread(t *testing.T, sync Sync) {
	t.Helper()
	l.ServeTCP(t, 8080)
	sync(l.Web())
	answers, err := Dial(l.Client, "198.18.0.10:80", 60)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, a := range answers {
		count[a.Backend]++
		if a.Client != ClientAddr.String() {
			t.Errorf("%s saw client %s, want %s (DNAT only, no SNAT)", a.Backend, a.Client, ClientAddr)
		}
	}
	// Each backend's count is Binomial(60, 1/3): below 5 has probability ~1e-5.
	for _, b := range []string{"b0", "b1", "b2"} {
		if count[b] < 5 {
			t.Errorf("backend %s got %d of 60 connections, want a fair share: %v", b, count[b], count)
		}
	}
	t.Logf("connections per backend: %v", count)
}

// CheckAffinity: with ClientIP affinity, every connection of the client goes
// to the backend its first one went to.
func (l *Lab) CheckAffinity(t *testing.T, sync Sync) {
	t.Helper()
	l.ServeTCP(t, 8080)
	sync(l.Web(st.WithAffinity(time.Minute)))
	answers, err := Dial(l.Client, "198.18.0.10:80", 20)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range answers[1:] {
		if a.Backend != answers[0].Backend {
			t.Fatalf("affinity broken: first connection went to %s, a later one to %s", answers[0].Backend, a.Backend)
		}
	}
}

// CheckNodePort: a NodePort reached from another namespace. Policy Cluster
// masquerades, so the backend sees the node's address on its link; policy
// Local keeps the client's.
func (l *Lab) CheckNodePort(t *testing.T, sync Sync) {
	t.Helper()
	l.ServeTCP(t, 8080)
	for _, tt := range []struct {
		name       string
		opts       []st.Opt
		masquerade bool
	}{
		{"Cluster", []st.Opt{st.WithNodePort(30080)}, true},
		{"Local", []st.Opt{st.WithNodePort(30080), st.WithExternalLocal()}, false},
	} {
		sync(l.Web(tt.opts...))
		answers, err := Dial(l.Client, "198.19.10.1:30080", 6)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		for _, a := range answers {
			want := ClientAddr.String()
			if tt.masquerade {
				want = "198.19.1" + string(a.Backend[1]+1) + ".1"
			}
			if a.Client != want {
				t.Errorf("%s: backend %s saw %s, want %s", tt.name, a.Backend, a.Client, want)
			}
		}
	}
}

// CheckUDPConntrack: a UDP flow keeps its endpoint while the endpoint lives;
// when the endpoint is removed, the conntrack cleanup moves it to a live one
// (kubernetes/kubernetes#19029), and Health counts the entries deleted. fam is the
// family of the Dataplane sync uses: for IPv6 the Service is dual-stack and the
// flow goes to its IPv6 ClusterIP (the Lab needs AddIPv6), through the IPv6
// conntrack table.
func (l *Lab) CheckUDPConntrack(t *testing.T, sync Sync, fam service.Family) {
	t.Helper()
	l.ServeUDP(t, 5353)
	endpoints, vip, opts := l.Endpoints, "198.18.0.53:53", []st.Opt{st.WithProtocol(service.UDP)}
	if fam == service.IPv6 {
		endpoints, vip = l.Endpoints6, "[2001:db8:18::53]:53"
		opts = append(opts, st.WithDualStack("2001:db8:18::53"))
	}
	dns := func(eps []service.Endpoint) *service.Snapshot {
		return st.Snapshot(st.Service("dns", "198.18.0.53", 53, eps, opts...)).Family(fam)
	}
	sync(dns(endpoints(5353)))
	c := NewUDPClient(t, l.Client, vip)
	first, err := c.Ask()
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if got, err := c.Ask(); err != nil || got != first {
			t.Fatalf("the flow moved from %s to %s (%v) without a change", first, got, err)
		}
	}
	var keep []service.Endpoint
	for i, e := range endpoints(5353) {
		if first != fmt.Sprintf("b%d", i) {
			keep = append(keep, e)
		}
	}
	h := sync(dns(keep)) // the removed backend still runs: only conntrack moves the flow
	if got, err := c.Ask(); err != nil || got == first {
		t.Errorf("after removing %s: answered by %s (%v), want another backend (the %s conntrack entry not deleted?)", first, got, err, fam)
	}
	if h.ConntrackDeleted == 0 || h.ConntrackErrors != 0 {
		t.Errorf("health %+v: want %s conntrack entries deleted without errors", h, fam)
	}
}
