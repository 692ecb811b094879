package ruletest

import (
	"context"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/service"
	st "github.com/svcproxy/svcproxy/service/servicetest"
)

// History is the Snapshots a cluster goes through, one change at a time: what
// partial syncs are checked against.
func History() []*service.Snapshot {
	web := func(eps []service.Endpoint, opts ...st.Opt) *service.Service {
		return st.Service("web", "198.18.0.10", 80, eps, append([]st.Opt{st.WithNodePort(30080)}, opts...)...)
	}
	api := st.Service("api", "198.18.0.20", 443, st.ThreeEndpoints()[:2])
	dns := st.Service("dns", "198.18.0.53", 53, st.ThreeEndpoints(), st.WithProtocol(service.UDP))
	return []*service.Snapshot{
		st.Snapshot(web(st.ThreeEndpoints()), api),
		st.Snapshot(web(st.ThreeEndpoints()[1:]), api),                                // an endpoint leaves
		st.Snapshot(web(st.ThreeEndpoints()[1:]), api, dns),                           // a service arrives
		st.Snapshot(web(nil), api, dns),                                               // no endpoints: REJECT
		st.Snapshot(web(st.ThreeEndpoints(), st.WithAffinity(time.Minute)), api, dns), // back, with affinity
		st.Snapshot(web(st.ThreeEndpoints(), st.WithExternalLocal()), dns),            // a service leaves, policy Local
		st.Snapshot(),
	}
}

// CheckConnections: a sync that rewrites a port's rules (a full sync rewrites
// them all, a partial one those of the ports that changed) must not reset
// the count of new connections that hybrid's Promoter reads of it, nor lose
// what an endpoint that left had counted.
func CheckConnections(t *testing.T, path Path) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	r := path.New(t, Options{CountConnections: true, FullSyncPeriod: time.Minute, Now: func() time.Time { return now }})
	web := History()[0].Ports()[1] // default/web:p (api sorts first)
	ports := dataplane.PortSet{web.Name: true}
	Sync(t, r, History()[0])
	r.Hit(t, web.Name, 5) // 5 connections to each of its three endpoints
	count := func(what string) uint64 {
		t.Helper()
		got, err := r.Connections(context.Background(), nil, ports)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d", what, got[web.Name])
		return got[web.Name]
	}
	if n := count("before"); n != 15 {
		t.Fatalf("before any resync: %d connections, want 15", n)
	}
	now = now.Add(2 * time.Minute) // the next sync is full: every rule rewritten
	Sync(t, r, History()[0])
	if h := r.Health(); h.FullSyncs != 2 {
		t.Fatalf("health %+v: want a second full sync", h)
	}
	if n := count("after a full sync"); n != 15 {
		t.Errorf("after a full sync: %d connections, want 15 (kept)", n)
	}
	r.Hit(t, web.Name, 1)
	partials := r.Health().PartialSyncs
	Sync(t, r, History()[1]) // an endpoint leaves: a partial sync rewrites web's rules
	if h := r.Health(); h.PartialSyncs != partials+1 {
		t.Fatalf("health %+v: want a partial sync", h)
	}
	if n := count("after an endpoint left"); n != 18 {
		t.Errorf("after a partial sync that removed an endpoint: %d, want 18 (its count kept)", n)
	}
	if got, err := r.Connections(context.Background(), nil, dataplane.PortSet{{Port: "none"}: true}); err != nil || len(got) != 0 {
		t.Errorf("connections of a port no sync applied: %v, %v; want none", got, err)
	}
}
