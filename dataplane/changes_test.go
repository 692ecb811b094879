package dataplane

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/svcproxy/svcproxy/service"
)

// The totals are the source's counts; pending is what the
// source recorded beyond the latest Snapshot handed to the dataplane, and
// falls to 0 when the Snapshot that includes every change is handed over.
func TestChangeMetrics(t *testing.T) {
	var services, endpoints uint64 // the source's counts
	c := NewChangeMetrics(func() (uint64, uint64) { return services, endpoints })
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	stamped := func(s, e uint64) *service.Snapshot {
		return service.NewSnapshot(nil, nil, service.WithChanges(s, e))
	}

	steps := []struct {
		name                string
		services, endpoints uint64            // the source's counts now
		took                *service.Snapshot // handed to the dataplane, if any
		want                map[string]float64
	}{
		{"start", 0, 0, nil, counts(0, 0, 0, 0)},
		{"adds, not synced", 2, 3, nil, counts(2, 3, 2, 3)},
		{"synced", 2, 3, stamped(2, 3), counts(2, 3, 0, 0)},
		{"updates and deletes after the Snapshot was built", 4, 7, stamped(3, 5), counts(4, 7, 1, 2)},
		{"an older Snapshot again (a resync) takes nothing back", 4, 7, stamped(2, 3), counts(4, 7, 1, 2)},
		{"synced", 4, 7, stamped(4, 7), counts(4, 7, 0, 0)},
	}
	for _, s := range steps {
		services, endpoints = s.services, s.endpoints
		if s.took != nil {
			c.Took(s.took)
		}
		fams, err := reg.Gather()
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		byName := map[string]*dto.MetricFamily{}
		for _, f := range fams {
			byName[f.GetName()] = f
		}
		for name, want := range s.want {
			if got, ok := value(byName, name); !ok || got != want {
				t.Errorf("%s: %s = %v (present %v), want %v", s.name, name, got, ok, want)
			}
		}
	}
}

func counts(servicesTotal, endpointsTotal, servicesPending, endpointsPending float64) map[string]float64 {
	return map[string]float64{
		"kubeproxy_sync_proxy_rules_service_changes_total":    servicesTotal,
		"kubeproxy_sync_proxy_rules_endpoint_changes_total":   endpointsTotal,
		"kubeproxy_sync_proxy_rules_service_changes_pending":  servicesPending,
		"kubeproxy_sync_proxy_rules_endpoint_changes_pending": endpointsPending,
	}
}

// value is the value of name's one unlabelled series (counter or gauge), and
// whether there is one.
func value(fams map[string]*dto.MetricFamily, name string) (float64, bool) {
	f := fams[name]
	if f == nil || len(f.GetMetric()) != 1 {
		return 0, false
	}
	if c := f.GetMetric()[0].GetCounter(); c != nil {
		return c.GetValue(), true
	}
	return f.GetMetric()[0].GetGauge().GetValue(), true
}
