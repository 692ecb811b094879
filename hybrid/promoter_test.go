package hybrid

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/service"
)

// fakeClock is moved by hand (the Promoter's and hybrid mode's tests).
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time          { return c.now }
func (c *fakeClock) Advance(d time.Duration) { c.now = c.now.Add(d) }

var web = service.PortName{NamespacedName: service.NamespacedName{Namespace: "default", Name: "web"}, Port: "http", Protocol: service.TCP}

// step advances the clock by after, observes web's cumulative count, and, when
// confirm is set, confirms the moves it got. want is the moves, in Move.String
// form, joined by "; ".
type step struct {
	after   time.Duration
	count   uint64
	confirm bool
	want    string
}

func TestPromoter(t *testing.T) {
	cfg := PromoterConfig{PromoteConnRate: 20, PromoteAfter: 2 * time.Second, DemoteAfter: 3 * time.Second}
	tests := []struct {
		name  string
		cfg   PromoterConfig
		steps []step
		path  Path // web's path at the end
	}{
		{
			name: "first sample is a baseline",
			cfg:  cfg,
			steps: []step{
				{count: 1_000_000},
			},
			path: Userspace,
		},
		{
			name: "a low rate stays in userspace",
			cfg:  cfg,
			steps: []step{
				{count: 0},
				{after: time.Second, count: 5},
				{after: time.Second, count: 24}, // 19/s: just below
				{after: time.Second, count: 30},
				{after: time.Second, count: 40},
			},
			path: Userspace,
		},
		{
			name: "hot for PromoteAfter is promoted",
			cfg:  cfg,
			steps: []step{
				{count: 0},
				{after: time.Second, count: 20}, // 20/s: hot, held 1s
				{after: time.Second, count: 60, confirm: true, want: "default/web:http -> kernel (30.0 conn/s for 2s)"},
				{after: time.Second, count: 0},   // the kernel's counter: a baseline
				{after: time.Second, count: 100}, // busy in the kernel: no move
			},
			path: Kernel,
		},
		{
			name: "a dip restarts the streak",
			cfg:  cfg,
			steps: []step{
				{count: 0},
				{after: time.Second, count: 30},
				{after: time.Second, count: 31}, // 1/s
				{after: time.Second, count: 61},
				{after: time.Second, count: 91, want: "default/web:http -> kernel (30.0 conn/s for 2s)"},
			},
			path: Userspace, // not confirmed
		},
		{
			name: "a move is proposed until confirmed",
			cfg:  cfg,
			steps: []step{
				{count: 0},
				{after: time.Second, count: 40},
				{after: time.Second, count: 80, want: "default/web:http -> kernel (40.0 conn/s for 2s)"},
				{after: time.Second, count: 120, confirm: true, want: "default/web:http -> kernel (40.0 conn/s for 3s)"},
			},
			path: Kernel,
		},
		{
			name: "PromoteAfter 0 promotes at the first hot interval",
			cfg:  PromoterConfig{PromoteConnRate: 10},
			steps: []step{
				{count: 7},
				{after: 500 * time.Millisecond, count: 12, want: "default/web:http -> kernel (10.0 conn/s for 500ms)"},
			},
			path: Userspace,
		},
		{
			name: "quiet in the kernel for DemoteAfter is demoted",
			cfg:  cfg,
			steps: []step{
				{count: 0},
				{after: time.Second, count: 50},
				{after: time.Second, count: 100, confirm: true, want: "default/web:http -> kernel (50.0 conn/s for 2s)"},
				{after: time.Second, count: 900}, // kernel baseline
				{after: time.Second, count: 950}, // busy
				{after: time.Second, count: 955}, // quiet 1s
				{after: time.Second, count: 955}, // 2s
				{after: time.Second, count: 958, confirm: true, want: "default/web:http -> userspace (2.7 conn/s for 3s)"},
				{after: time.Second, count: 10_000}, // userspace counter again: a baseline
			},
			path: Userspace,
		},
		{
			name: "DemoteAfter 0 never demotes",
			cfg:  PromoterConfig{PromoteConnRate: 20, PromoteAfter: time.Second},
			steps: []step{
				{count: 0},
				{after: time.Second, count: 20, confirm: true, want: "default/web:http -> kernel (20.0 conn/s for 1s)"},
				{after: time.Second, count: 0},
				{after: time.Hour, count: 0},
				{after: time.Hour, count: 0},
			},
			path: Kernel,
		},
		{
			name: "a restarted counter counts from zero",
			cfg:  cfg,
			steps: []step{
				{count: 500},
				{after: time.Second, count: 25}, // restarted: 25 new
				{after: time.Second, count: 50, want: "default/web:http -> kernel (25.0 conn/s for 2s)"}, // 25 more
			},
			path: Userspace,
		},
		{
			name: "no time passed: no rate",
			cfg:  PromoterConfig{PromoteConnRate: 1},
			steps: []step{
				{count: 0},
				{count: 100},
				{after: time.Second, count: 100, want: "default/web:http -> kernel (100.0 conn/s for 1s)"},
			},
			path: Userspace,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
			tt.cfg.Clock = clock
			p, err := NewPromoter(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tt.steps {
				clock.Advance(s.after)
				moves := p.Observe(map[service.PortName]uint64{web: s.count})
				if got := movesString(moves); got != s.want {
					t.Fatalf("step %d (count %d): moves %q, want %q", i, s.count, got, s.want)
				}
				if s.confirm {
					for _, m := range moves {
						p.Moved(m.Port, m.To)
					}
				}
			}
			if got := p.Path(web); got != tt.path {
				t.Errorf("path %s, want %s", got, tt.path)
			}
		})
	}
}

func movesString(moves []Move) string {
	s := make([]string, len(moves))
	for i, m := range moves {
		s[i] = m.String()
	}
	return strings.Join(s, "; ")
}

func TestPromoterPorts(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	p, err := NewPromoter(PromoterConfig{PromoteConnRate: 10, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	db := web
	db.Name, db.Port = "db", "sql"
	dns := web
	dns.Name, dns.Port, dns.Protocol = "dns", "dns", service.UDP

	p.Observe(map[service.PortName]uint64{web: 0, db: 0, dns: 0})
	clock.Advance(time.Second)
	// db is not sampled this time: its interval just gets longer.
	got := movesString(p.Observe(map[service.PortName]uint64{web: 50, dns: 10}))
	if want := "default/dns:dns/UDP -> kernel (10.0 conn/s for 1s); default/web:http -> kernel (50.0 conn/s for 1s)"; got != want {
		t.Fatalf("moves %q, want %q", got, want)
	}
	p.Moved(web, Kernel)
	clock.Advance(time.Second)
	if got := movesString(p.Observe(map[service.PortName]uint64{db: 15})); got != "" {
		t.Fatalf("db at 7.5/s over 2s: moves %q, want none", got)
	}

	p.Retain(func(n service.PortName) bool { return n != web })
	var names []string
	for _, st := range p.Status() {
		names = append(names, fmt.Sprintf("%s=%s", st.Name, st.Path))
	}
	if got, want := strings.Join(names, " "), "default/db:sql=userspace default/dns:dns/UDP=userspace"; got != want {
		t.Errorf("status after Retain: %s, want %s", got, want)
	}
	if got := p.Path(web); got != Userspace {
		t.Errorf("a forgotten port: path %s, want userspace", got)
	}
}

func TestNewPromoterErrors(t *testing.T) {
	tests := []struct {
		cfg  PromoterConfig
		want string
	}{
		{PromoterConfig{}, "PromoteConnRate 0: must be above 0"},
		{PromoterConfig{PromoteConnRate: -1}, "PromoteConnRate -1: must be above 0"},
		{PromoterConfig{PromoteConnRate: 1, PromoteAfter: -time.Second}, "PromoteAfter -1s: must not be negative"},
		{PromoterConfig{PromoteConnRate: 1, DemoteAfter: -time.Second}, "DemoteAfter -1s: must not be negative"},
	}
	for _, tt := range tests {
		_, err := NewPromoter(tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewPromoter(%+v): %v, want %q", tt.cfg, err, tt.want)
		}
	}
}
