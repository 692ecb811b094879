package dataplane

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svcproxy/svcproxy/service"
)

// ChangeMetrics are kube-proxy's four change metrics (k8s.io/kubernetes
// v1.37.2 pkg/proxy/metrics): kubeproxy_sync_proxy_rules_{service,endpoint}_changes_total,
// the changes the source has recorded (service/watch's Watcher.Changes), and
// ..._changes_pending, those of them not yet taken up by a sync. kube-proxy
// zeroes pending when a sync checks the changes out, at its start
// (ServiceChangeTracker / EndpointsChangeTracker checkoutChanges): here, when
// a Snapshot is handed to the dataplane (Took), pending drops to the changes
// the source recorded after it built that Snapshot. A failed sync does not
// raise it again, as kube-proxy's does not: the dataplane retries on its own.
//
// kube-proxy's endpoint pending counts EndpointSlices with a change waiting
// and its Service pending the Services with one (a Service updated twice
// between syncs is one); svcproxy's count events, as the totals do. Both are
// one per process, with no ip_family label, as kube-proxy's.
type ChangeMetrics struct {
	source func() (services, endpoints uint64) // cumulative, never falling

	mu                  sync.Mutex
	services, endpoints uint64 // the counts of the latest Snapshot handed over

	servicesTotal, endpointsTotal, servicesPending, endpointsPending *prometheus.Desc
}

// NewChangeMetrics counts the changes source has recorded (cumulative, never
// falling: service/watch's Watcher.Changes).
func NewChangeMetrics(source func() (services, endpoints uint64)) *ChangeMetrics {
	return &ChangeMetrics{
		source:           source,
		servicesTotal:    prometheus.NewDesc("kubeproxy_sync_proxy_rules_service_changes_total", "Cumulative proxy rules Service changes", nil, nil),
		endpointsTotal:   prometheus.NewDesc("kubeproxy_sync_proxy_rules_endpoint_changes_total", "Cumulative proxy rules Endpoint changes", nil, nil),
		servicesPending:  prometheus.NewDesc("kubeproxy_sync_proxy_rules_service_changes_pending", "Pending proxy rules Service changes", nil, nil),
		endpointsPending: prometheus.NewDesc("kubeproxy_sync_proxy_rules_endpoint_changes_pending", "Pending proxy rules Endpoint changes", nil, nil),
	}
}

// Took records that snap was handed to the dataplane: the changes it
// includes are no longer pending. An older Snapshot never takes them back.
func (c *ChangeMetrics) Took(snap *service.Snapshot) {
	services, endpoints := snap.Changes()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.services, c.endpoints = max(c.services, services), max(c.endpoints, endpoints)
}

// Describe implements prometheus.Collector.
func (c *ChangeMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.servicesTotal
	ch <- c.endpointsTotal
	ch <- c.servicesPending
	ch <- c.endpointsPending
}

// Collect implements prometheus.Collector.
func (c *ChangeMetrics) Collect(ch chan<- prometheus.Metric) {
	services, endpoints := c.source()
	c.mu.Lock()
	tookServices, tookEndpoints := c.services, c.endpoints
	c.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(c.servicesTotal, prometheus.CounterValue, float64(services))
	ch <- prometheus.MustNewConstMetric(c.endpointsTotal, prometheus.CounterValue, float64(endpoints))
	ch <- prometheus.MustNewConstMetric(c.servicesPending, prometheus.GaugeValue, pending(services, tookServices))
	ch <- prometheus.MustNewConstMetric(c.endpointsPending, prometheus.GaugeValue, pending(endpoints, tookEndpoints))
}

// pending is recorded minus taken; never below 0 (a Snapshot stamped by
// another source, as in tests, may claim more).
func pending(recorded, taken uint64) float64 {
	if taken >= recorded {
		return 0
	}
	return float64(recorded - taken)
}
