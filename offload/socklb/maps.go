package socklb

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	ksocklb "github.com/svcproxy/svcproxy/kernel/socklb"
	"github.com/svcproxy/svcproxy/offload/kernelsync"
	"github.com/svcproxy/svcproxy/service"
)

// Maps keeps the hooks' maps in step with the latest Snapshot, one element
// at a time: a sync renders only the ports that changed (a port equal to the
// one its last rendering was made from reuses it, kernelsync.RenderPorts),
// and writes only the elements whose entry differs from what the maps hold:
// SetService for a new or changed frontend, DeleteService for one no port
// has any more. There is no full reload, ever: a connect() in flight sees the
// old or the new entry of its Service, and every other Service is untouched.
//
// What the maps hold is read from the kernel at the first sync (adopting what
// a previous process left pinned, so a restart changes only what changed
// meanwhile), after a failed write, and once per Config.CheckPeriod: a sync
// that finds the maps other than it left them (another program deleted or
// changed an element) repairs them and counts a repair.
type Maps struct {
	cfg Config

	mu       sync.Mutex                        // one sync at a time; guards the fields below
	applied  map[service.PortName]*portEntries // the ports the last sync rendered; nil before the first
	owner    map[ksocklb.Service]*portEntries  // which applied port each frontend is rendered from
	inMap    map[ksocklb.Service]ksocklb.Entry // the family's elements in the maps; nil: read them
	lastRead time.Time                         // when the maps were last read

	statMu sync.Mutex // guards health and ports
	health Health
	ports  []*portEntries // as last synced, in the Snapshot's order

	duration prometheus.Histogram
}

// Health is the maps' sync record, for /status and /metrics.
type Health struct {
	// Synced: a sync has succeeded; Healthy: the last one did.
	Synced    bool   `json:"synced"`
	Healthy   bool   `json:"healthy"`
	LastError string `json:"lastError,omitempty"`
	// LastSync is when the last successful sync ended, LastSyncDuration how
	// long it took from the Snapshot to the last map update.
	LastSync         time.Time     `json:"lastSync"`
	LastSyncDuration time.Duration `json:"lastSyncDuration"`
	// Checks are the syncs that read the maps back first; Syncs all of them.
	Syncs    uint64 `json:"syncs"`
	Checks   uint64 `json:"checks"`
	Failures uint64 `json:"failures"`
	// Repairs are the checks that found the maps other than the last sync
	// left them, and LastRepair what the last one found.
	Repairs    uint64 `json:"repairs"`
	LastRepair string `json:"lastRepair,omitempty"`
	// Sets and Deletes count the element updates written.
	Sets    uint64 `json:"sets"`
	Deletes uint64 `json:"deletes"`
	// Elements are the family's elements in the maps after the last sync.
	Elements int `json:"elements"`
}

// NewMaps checks cfg and returns Maps that have synced nothing: until
// the first Sync the maps keep whatever they hold (a restart does not empty
// them while the sources are still listing).
func NewMaps(cfg Config) (*Maps, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	return &Maps{cfg: cfg, duration: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "svcproxy_socklb_sync_duration_seconds",
		Help:    "How long one sync of the socket-LB maps took, from the Snapshot to the last element written.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
	})}, nil
}

// Sync makes the maps carry snap's ports (those Config.Carries carries).
// Each element is written on its own; a failed write does not stop the
// others, and the error names every element that failed. The next sync reads
// the maps again and writes what is still missing.
func (m *Maps) Sync(ctx context.Context, snap *service.Snapshot) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	start := m.cfg.Now()
	check := m.inMap == nil || start.Sub(m.lastRead) >= m.cfg.CheckPeriod
	var repair string
	if check {
		read, err := m.cfg.LB.Services(ctx)
		if err != nil {
			err = fmt.Errorf("socklb: read the maps: %w", err)
			m.record(start, true, 0, 0, err, "")
			return err
		}
		read = m.ofFamily(read)
		if m.inMap != nil {
			repair = differences(m.inMap, read)
		}
		m.inMap, m.lastRead = read, start
	}

	ports := kernelsync.RenderPorts(snap, m.applied, m.cfg.Carries, func(sp *service.Port) *portEntries { return renderPort(&m.cfg, sp, snap.Node()) })
	touched := m.index(ports, check)
	sets, deletes, err := m.write(ctx, touched)
	m.commit(ports)
	if err != nil {
		m.inMap = nil // what the maps hold is unknown now: read them next time
	}
	m.record(start, check, sets, deletes, err, repair)
	if err == nil {
		m.duration.Observe(m.cfg.Now().Sub(start).Seconds())
	}
	return err
}

// ofFamily keeps the elements of the maps' family.
func (m *Maps) ofFamily(all map[ksocklb.Service]ksocklb.Entry) map[ksocklb.Service]ksocklb.Entry {
	out := make(map[ksocklb.Service]ksocklb.Entry, len(all))
	for k, e := range all {
		if m.cfg.Family.Has(k.VIP) {
			out[k] = e
		}
	}
	return out
}

// index brings owner up to date with a rendering and returns the frontends
// whose element may have to change: every one after a read of the maps,
// otherwise those of the ports rendered anew or removed. A frontend two
// Services claim (the same ClusterIP twice, which an API server never
// allocates but a manifests file may hold) belongs to the first in the
// Snapshot's order; the next check settles an ownership that a partial sync
// left to the other one.
func (m *Maps) index(ports kernelsync.Ports[*portEntries], all bool) []ksocklb.Service {
	touched := map[ksocklb.Service]bool{}
	if all || m.owner == nil {
		m.owner = map[ksocklb.Service]*portEntries{}
		for _, pe := range ports.All {
			for _, el := range pe.elements {
				if _, ok := m.owner[el.svc]; !ok {
					m.owner[el.svc] = pe
				}
			}
		}
		for k := range m.owner {
			touched[k] = true
		}
		for k := range m.inMap {
			touched[k] = true
		}
		return sortedServices(touched)
	}
	release := func(pe *portEntries) {
		for _, el := range pe.elements {
			touched[el.svc] = true
			if m.owner[el.svc] == pe {
				delete(m.owner, el.svc)
			}
		}
	}
	for _, c := range ports.Changed {
		if c.Old != nil {
			release(c.Old)
		}
	}
	for _, pe := range ports.Removed {
		release(pe)
	}
	for _, c := range ports.Changed {
		for _, el := range c.Cur.elements {
			touched[el.svc] = true
			if _, ok := m.owner[el.svc]; !ok {
				m.owner[el.svc] = c.Cur
			}
		}
	}
	return sortedServices(touched)
}

// write makes each touched frontend's element what its owner renders, or
// deletes it when no port has it.
func (m *Maps) write(ctx context.Context, touched []ksocklb.Service) (sets, deletes int, err error) {
	var errs []error
	for _, k := range touched {
		have, inMap := m.inMap[k]
		pe, wanted := m.owner[k]
		switch {
		case wanted:
			want := entryOf(pe, k)
			if inMap && sameEntry(have, want) {
				continue
			}
			if err := m.cfg.LB.SetService(ctx, k, want); err != nil {
				errs = append(errs, fmt.Errorf("%s (%s): %w", k, pe.name, err))
				continue
			}
			m.inMap[k] = want
			sets++
		case inMap:
			if err := m.cfg.LB.DeleteService(ctx, k); err != nil {
				errs = append(errs, fmt.Errorf("%s: delete: %w", k, err))
				continue
			}
			delete(m.inMap, k)
			deletes++
		}
	}
	if len(errs) > 0 {
		return sets, deletes, fmt.Errorf("socklb: %d of %d elements not written: %w", len(errs), len(touched), errors.Join(errs...))
	}
	return sets, deletes, nil
}

// entryOf is the entry pe renders for frontend k.
func entryOf(pe *portEntries, k ksocklb.Service) ksocklb.Entry {
	for _, el := range pe.elements {
		if el.svc == k {
			return el.entry
		}
	}
	panic("socklb: " + k.String() + " is not a frontend of " + pe.name.String())
}

// commit keeps the rendering: the next sync compares the Snapshot with it.
func (m *Maps) commit(ports kernelsync.Ports[*portEntries]) {
	if m.applied == nil {
		m.applied = make(map[service.PortName]*portEntries, len(ports.All))
		for _, pe := range ports.All {
			m.applied[pe.name] = pe
		}
	} else { // in place: 10,000 ports, one changed
		for _, c := range ports.Changed {
			m.applied[c.Cur.name] = c.Cur
		}
		for _, pe := range ports.Removed {
			delete(m.applied, pe.name)
		}
	}
	m.statMu.Lock()
	m.ports = ports.All
	m.statMu.Unlock()
}

// record updates the health after a sync.
func (m *Maps) record(start time.Time, check bool, sets, deletes int, err error, repair string) {
	m.statMu.Lock()
	defer m.statMu.Unlock()
	h := &m.health
	h.Syncs++
	if check {
		h.Checks++
	}
	if repair != "" {
		h.Repairs++
		h.LastRepair = repair
	}
	h.Sets += uint64(sets)
	h.Deletes += uint64(deletes)
	if m.inMap != nil {
		h.Elements = len(m.inMap)
	}
	if err != nil {
		h.Healthy, h.LastError = false, err.Error()
		h.Failures++
		return
	}
	end := m.cfg.Now()
	h.Synced, h.Healthy, h.LastError = true, true, ""
	h.LastSync, h.LastSyncDuration = end, end.Sub(start)
}

// Health returns the sync record.
func (m *Maps) Health() Health {
	m.statMu.Lock()
	defer m.statMu.Unlock()
	return m.health
}

// Status returns the service ports as last synced, in the Snapshot's order.
func (m *Maps) Status() []PortStatus {
	m.statMu.Lock()
	ports := m.ports
	m.statMu.Unlock()
	out := make([]PortStatus, len(ports))
	for i, pe := range ports {
		out[i] = pe.status
	}
	return out
}

// Frontends returns, for each port in names that the last sync carried (nil
// names: every port it carried), its elements' keys: what hybrid's counters
// are summed over.
func (m *Maps) Frontends(names map[service.PortName]bool) map[service.PortName][]ksocklb.Service {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[service.PortName][]ksocklb.Service{}
	for name, pe := range m.applied {
		if names != nil && !names[name] {
			continue
		}
		for _, el := range pe.elements {
			out[name] = append(out[name], el.svc)
		}
	}
	return out
}

// differences says how the maps differ from what the last sync left in
// them ("" when they do not): a few elements by name, and how many more.
func differences(want, got map[ksocklb.Service]ksocklb.Entry) string {
	var diffs []string
	for k, e := range want {
		g, ok := got[k]
		switch {
		case !ok:
			diffs = append(diffs, k.String()+" missing")
		case !sameEntry(e, g):
			diffs = append(diffs, k.String()+" changed")
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, k.String()+" not svcproxy's last write")
		}
	}
	if len(diffs) == 0 {
		return ""
	}
	slices.Sort(diffs)
	const show = 3
	if len(diffs) > show {
		return fmt.Sprintf("%s and %d more", strings.Join(diffs[:show], ", "), len(diffs)-show)
	}
	return strings.Join(diffs, ", ")
}

func sortedServices(set map[ksocklb.Service]bool) []ksocklb.Service {
	out := slices.Collect(maps.Keys(set))
	slices.SortFunc(out, compareServices)
	return out
}

func compareServices(a, b ksocklb.Service) int {
	if c := a.VIP.Compare(b.VIP); c != 0 {
		return c
	}
	if a.Port != b.Port {
		return int(a.Port) - int(b.Port)
	}
	return int(a.Protocol) - int(b.Protocol)
}
