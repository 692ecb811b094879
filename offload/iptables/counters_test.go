package iptables

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"regexp"
	"sync"
	"testing"
	"time"

	kiptables "github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/service"
)

func TestDNATCounts(t *testing.T) {
	save := `*nat
:PREROUTING ACCEPT [310:18600]
:SVCP-SEP-AAAA - [0:0]
:SVCP-SEP-BBBB - [0:0]
:SVCP-SVC-CCCC - [0:0]
[0:0] -A PREROUTING -m comment --comment "svcproxy service portals" -j SVCP-SERVICES
[2:120] -A SVCP-SEP-AAAA -s 198.19.2.2/32 -m comment --comment "default/web:http" -j SVCP-MARK-MASQ
[40:2400] -A SVCP-SEP-AAAA -p tcp -m comment --comment "default/web:http" -m tcp -j DNAT --to-destination 198.19.2.2:8080
[7:420] -A SVCP-SEP-BBBB -p tcp -m comment --comment "default/web:http" -m recent --set --name SVCP-SEP-BBBB --mask 255.255.255.255 --rsource -m tcp -j DNAT --to-destination 198.19.2.3:8080
[47:2820] -A SVCP-SVC-CCCC -m comment --comment "default/web:http -> 198.19.2.2:8080" -m statistic --mode random --probability 0.5000000000 -j SVCP-SEP-AAAA
[3:180] -A PORTALS -p tcp -m tcp --dport 80 -j REDIRECT --to-ports 40000
COMMIT
`
	got := dnatCounts([]byte(save))
	want := map[string]uint64{"SVCP-SEP-AAAA": 40, "SVCP-SEP-BBBB": 7}
	if !maps.Equal(got, want) {
		t.Errorf("dnatCounts: %v, want %v", got, want)
	}
}

// countingIPT is a Fake that counts packets per chain as the kernel does: a
// chain's DNAT rules show the packets added with hit, and a restore that
// declares a chain (":NAME - [0:0]") starts its counters again at 0.
type countingIPT struct {
	*kiptables.Fake
	mu     sync.Mutex
	counts map[string]uint64
}

var declared = regexp.MustCompile(`(?m)^:(SVCP-[A-Z]+-[A-Z0-9]+) - \[0:0\]$`)

func (c *countingIPT) Restore(ctx context.Context, rules []byte) error {
	if err := c.Fake.Restore(ctx, rules); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range declared.FindAllSubmatch(rules, -1) {
		delete(c.counts, string(m[1]))
	}
	return nil
}

func (c *countingIPT) SaveCounters(ctx context.Context, t kiptables.Table) ([]byte, error) {
	save, err := c.Fake.SaveCounters(ctx, t)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for chain, n := range c.counts {
		save = bytes.ReplaceAll(save, []byte("[0:0] -A "+chain+" "), []byte(fmt.Sprintf("[%d:0] -A %s ", n, chain)))
	}
	return save, nil
}

// hit counts n new connections on every SVCP-SEP- chain of port.
func (c *countingIPT) hit(p *Proxier, port service.PortName, n uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ch := range appliedChains(p, port) {
		if ch[:9] == "SVCP-SEP-" {
			c.counts[ch] += n
		}
	}
}

// Issue 11: a sync that rewrites a port's chains (a full sync rewrites them
// all) must not reset the count hybrid's promoter reads.
func TestConnectionsSurviveFullSync(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	ipt := &countingIPT{Fake: kiptables.NewFake(), counts: map[string]uint64{}}
	p, err := NewProxier(ProxierConfig{Rules: testConfig, IPTables: ipt, CountConnections: true,
		FullSyncPeriod: time.Minute, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	web := history()[0].Ports()[1] // default/web:http (api sorts first)
	ports := map[service.PortName]bool{web.Name: true}
	mustSync(t, p, history()[0])
	ipt.hit(p, web.Name, 5) // 5 connections on each of its three endpoints
	count := func(what string) uint64 {
		t.Helper()
		got, err := p.Connections(context.Background(), ports)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d", what, got[web.Name])
		return got[web.Name]
	}
	if n := count("before"); n != 15 {
		t.Fatalf("before any resync: %d connections, want 15", n)
	}
	now = now.Add(2 * time.Minute) // the next sync is full: every chain rewritten
	mustSync(t, p, history()[0])
	if h := p.Health(); h.FullSyncs != 2 {
		t.Fatalf("health %+v: want a second full sync", h)
	}
	if n := count("after a full sync"); n != 15 {
		t.Errorf("after a full sync: %d connections, want 15 (carried over)", n)
	}
	ipt.hit(p, web.Name, 1)
	mustSync(t, p, history()[1]) // an endpoint leaves: a partial sync rewrites web's chains
	if n := count("after an endpoint left"); n != 18 {
		t.Errorf("after a partial sync that removed an endpoint: %d, want 18 (its chain's count kept)", n)
	}
}

// appliedChains are the nat chains of port as the last sync applied them.
func appliedChains(p *Proxier, port service.PortName) (chains []string) {
	p.sync.BetweenSyncs(func(applied map[service.PortName]*portRules) { chains = applied[port].chains })
	return chains
}
