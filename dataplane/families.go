package dataplane

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svcproxy/svcproxy/service"
)

// Families is one dataplane per IP family behind one Interface, as kube-proxy
// runs one proxier per family behind its MetaProxier. Each family's dataplane
// is the single-stack code of its mode, built for that family (iptables or
// ip6tables, its addresses and masks), and is handed that family's view of
// every Snapshot (service.Snapshot.Family): a dual-stack Service is served by
// both, a single-stack one by one. The families share nothing, so hybrid mode
// promotes a service port in one family and not in the other.
type Families struct {
	fams []familyDP // IPv4 first
}

type familyDP struct {
	fam service.Family
	dp  Interface
	col prometheus.Collector // dp's metrics, labelled ip_family
}

var _ Interface = (*Families)(nil)

// NewFamilies composes the dataplanes of the families a node serves; nil for
// a family it does not (a node or kernel without IPv6). Both must be of the
// same mode.
func NewFamilies(ipv4, ipv6 Interface) (*Families, error) {
	f := &Families{}
	for _, x := range []struct {
		fam service.Family
		dp  Interface
	}{{service.IPv4, ipv4}, {service.IPv6, ipv6}} {
		if x.dp == nil {
			continue
		}
		f.fams = append(f.fams, familyDP{fam: x.fam, dp: x.dp,
			col: prometheus.WrapCollectorWith(prometheus.Labels{"ip_family": string(x.fam)}, x.dp)})
	}
	switch {
	case len(f.fams) == 0:
		return nil, errors.New("dataplane: no IP family to serve")
	case len(f.fams) == 2 && ipv4.Mode() != ipv6.Mode():
		return nil, fmt.Errorf("dataplane: IPv4 in %s mode, IPv6 in %s mode: want one mode", ipv4.Mode(), ipv6.Mode())
	}
	return f, nil
}

// Mode implements Interface.
func (f *Families) Mode() string { return f.fams[0].dp.Mode() }

// IPFamilies are the families served, IPv4 first.
func (f *Families) IPFamilies() []service.Family {
	out := make([]service.Family, len(f.fams))
	for i, x := range f.fams {
		out[i] = x.fam
	}
	return out
}

// Family returns the dataplane of one family; nil when it is not served.
func (f *Families) Family(fam service.Family) Interface {
	for _, x := range f.fams {
		if x.fam == fam {
			return x.dp
		}
	}
	return nil
}

// Sync implements Interface: each family's dataplane syncs its view of snap,
// IPv4 first, on the calling goroutine (so on the caller's network namespace:
// tests call it from netnstest's NS.Do). A failure in one family does not
// keep the other from syncing; the error joins the families' errors, each
// named by its family.
func (f *Families) Sync(ctx context.Context, snap *service.Snapshot) error {
	errs := make([]error, len(f.fams))
	for i, x := range f.fams {
		errs[i] = f.named(x, x.dp.Sync(ctx, snap.Family(x.fam)))
	}
	return errors.Join(errs...)
}

// FullSyncs implements FullSyncer: the families' full syncs together.
func (f *Families) FullSyncs() uint64 {
	var n uint64
	for _, x := range f.fams {
		n += FullSyncs(x.dp)
	}
	return n
}

// Run implements Interface: it runs every family's dataplane, each on its own
// goroutine, until ctx ends.
func (f *Families) Run(ctx context.Context) error {
	errs := make([]error, len(f.fams))
	var wg sync.WaitGroup
	for i, x := range f.fams {
		wg.Go(func() { errs[i] = f.named(x, x.dp.Run(ctx)) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// named prefixes err with its family on a dual-stack node.
func (f *Families) named(x familyDP, err error) error {
	if err == nil || len(f.fams) == 1 {
		return err
	}
	return fmt.Errorf("%s: %w", x.fam, err)
}

// Healthy implements Interface: every family must be.
func (f *Families) Healthy() error {
	errs := make([]error, len(f.fams))
	for i, x := range f.fams {
		errs[i] = f.named(x, x.dp.Healthy())
	}
	return errors.Join(errs...)
}

// Lag implements Interface: no family may lag.
func (f *Families) Lag() error {
	errs := make([]error, len(f.fams))
	for i, x := range f.fams {
		errs[i] = f.named(x, x.dp.Lag())
	}
	return errors.Join(errs...)
}

// Status implements Interface: the mode, the families served, and each
// family's own document under its name.
//
//	{"mode": "iptables", "ipFamilies": ["IPv4", "IPv6"], "IPv4": {...}, "IPv6": {...}}
func (f *Families) Status() any {
	st := map[string]any{"mode": f.Mode(), "ipFamilies": f.IPFamilies()}
	for _, x := range f.fams {
		st[string(x.fam)] = x.dp.Status()
	}
	return st
}

// Describe implements prometheus.Collector: each family's metrics, with the
// label ip_family="IPv4" or "IPv6".
func (f *Families) Describe(ch chan<- *prometheus.Desc) {
	for _, x := range f.fams {
		x.col.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (f *Families) Collect(ch chan<- prometheus.Metric) {
	for _, x := range f.fams {
		x.col.Collect(ch)
	}
}
