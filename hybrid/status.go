package hybrid

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/userspace"
)

// Healthy implements dataplane.Interface: both paths must be.
func (m *Dataplane) Healthy() error {
	var errs []error
	if err := m.us.LastError(); err != nil {
		errs = append(errs, fmt.Errorf("portals: %w", err))
	}
	if err := m.record.Healthy(); err != nil {
		errs = append(errs, fmt.Errorf("userspace: %w", err))
	}
	if err := m.kernel.Healthy(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Lag implements dataplane.Interface: neither path may lag.
func (m *Dataplane) Lag() error {
	var errs []error
	if err := m.record.Lag(); err != nil {
		errs = append(errs, fmt.Errorf("userspace: %w", err))
	}
	if err := m.kernel.Lag(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Port is one service port in /status.
type Port struct {
	Name string `json:"name"`
	// Path is "userspace", or the kernel path's mode: "iptables", "ipvs".
	Path  string    `json:"path"`
	Since time.Time `json:"since"`
	// Rate is the new connections per second of the last sampled interval.
	Rate float64 `json:"rate"`
	// Streak is how long the port has been hot (in userspace) or quiet (in
	// the kernel).
	Streak  string `json:"streak"`
	Samples uint64 `json:"samples"`
	// KernelFromStart: the port is on the kernel path because of what it
	// is, not its traffic (KernelFromStart); the Promoter leaves it there.
	KernelFromStart bool `json:"kernelFromStart,omitempty"`
}

// path is the name of a Promoter path for /status and /metrics.
func (m *Dataplane) path(p Path) string {
	if p == Kernel {
		return m.kernel.Mode()
	}
	return string(p)
}

// Status implements dataplane.Interface.
func (m *Dataplane) Status() any {
	var ports []Port
	pins := *m.pins.Load()
	for _, st := range m.promoter.Status() {
		ports = append(ports, Port{Name: st.Name, Path: m.path(st.Path), Since: st.Since, Rate: st.Rate,
			Streak: st.Streak.String(), Samples: st.Samples, KernelFromStart: pins[st.Port] && st.Path == Kernel})
	}
	return map[string]any{
		"mode":            dataplane.ModeHybrid,
		"offload":         m.kernel.Mode(),
		"promoteConnRate": m.cfg.Promoter.PromoteConnRate,
		"promoteAfter":    m.cfg.Promoter.PromoteAfter.String(),
		"demoteAfter":     m.cfg.Promoter.DemoteAfter.String(),
		"promotions":      m.promotions.Load(),
		"demotions":       m.demotions.Load(),
		"ports":           ports,
		"userspace":       m.us.Status(),
		"kernel":          m.kernel.Status(),
	}
}

var (
	descPromotions = prometheus.NewDesc("svcproxy_hybrid_promotions_total",
		"Service ports moved from userspace to the kernel path.", []string{"offload"}, nil)
	descDemotions = prometheus.NewDesc("svcproxy_hybrid_demotions_total",
		"Service ports moved from the kernel path back to userspace.", []string{"offload"}, nil)
	descPortPath = prometheus.NewDesc("svcproxy_hybrid_port_path",
		"1 for the path each service port takes now.", []string{"service_port", "path"}, nil)
)

// Describe implements prometheus.Collector: hybrid's own metrics, the userspace
// ports' counters, and the kernel path's metrics (its sync record among them).
func (m *Dataplane) Describe(ch chan<- *prometheus.Desc) {
	ch <- descPromotions
	ch <- descDemotions
	ch <- descPortPath
	userspace.PortCollector(m.us).Describe(ch)
	m.kernel.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Dataplane) Collect(ch chan<- prometheus.Metric) {
	off := m.kernel.Mode()
	ch <- prometheus.MustNewConstMetric(descPromotions, prometheus.CounterValue, float64(m.promotions.Load()), off)
	ch <- prometheus.MustNewConstMetric(descDemotions, prometheus.CounterValue, float64(m.demotions.Load()), off)
	for _, st := range m.promoter.Status() {
		ch <- prometheus.MustNewConstMetric(descPortPath, prometheus.GaugeValue, 1, st.Name, m.path(st.Path))
	}
	userspace.PortCollector(m.us).Collect(ch)
	m.kernel.Collect(ch)
}

// Userspace is the userspace proxier hybrid composes (for tests and tools that
// look at its listeners).
func (m *Dataplane) Userspace() *userspace.Proxier { return m.us }

// Kernel is the kernel path hybrid composes.
func (m *Dataplane) Kernel() dataplane.KernelPath { return m.kernel }
