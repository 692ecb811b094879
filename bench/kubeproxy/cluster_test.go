package kubeproxy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// cluster is what the benchmark keeps of the API server's state: the one
// writer of the Services and slices, it updates them by what it wrote last.
type cluster struct {
	sz     size
	client kubernetes.Interface

	mu     sync.Mutex
	slices map[int]*discoveryv1.EndpointSlice // as last written, for the Services whose endpoints change
	open   map[int]change                     // changes whose second half is not written yet, by Service
}

// rollingServices is how many Services have their endpoints changed (each
// an endpoint added, later removed), and as many are created and later
// deleted: changes/4 of each kind.
func rollingServices(changes int) int { return changes / 4 }

// rolling is the index of the k-th Service whose endpoints change, spread
// over the cluster and never the first or the last (the data path's).
func (sz size) rolling(k, n int) int { return 1 + k*(sz.services-2)/n }

// The Services whose endpoints change are mid-rollout: their endpoints are
// terminating but still serving, so both proxies send traffic to them only
// while no endpoint is ready (KEP-1669, kube-proxy's CategorizeEndpoints).
// The endpoint a change adds is ready and then takes every connection: the
// probe sees it on its first connection after the rules change, and sees
// its removal the same way, where with ready endpoints beside it the probe
// would have to try about as often as there are endpoints, and then still
// only know it with some probability.
func (c *cluster) baseSlice(svc *v1.Service, i int, rollers map[int]bool, at time.Time) *discoveryv1.EndpointSlice {
	ips := c.sz.endpointIPs(i)
	if rollers[i] {
		return newSlice(svc, terminating(ips), at)
	}
	return newSlice(svc, ready(ips), at)
}

// fill creates the node, the namespaces, and the size's Services with
// their slices, 32 writers at a time, as the EndpointSlice controller
// would: the slice after its Service, owned by it.
func (c *cluster) fill(ctx context.Context, changes int) error {
	if _, err := c.client.CoreV1().Nodes().Create(ctx, newNode(nodeClientSide.Addr()), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("node %s: %w", nodeName, err)
	}
	for i := range namespaces {
		_, ns := svcName(i)
		if _, err := c.client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("namespace %s: %w", ns, err)
		}
	}
	n := rollingServices(changes)
	rollers := map[int]bool{}
	for k := range n {
		rollers[c.sz.rolling(k, n)] = true
	}
	c.slices, c.open = map[int]*discoveryv1.EndpointSlice{}, map[int]change{}
	work := make(chan int)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := range work {
				if err := c.create(ctx, i, rollers); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for i := range c.sz.services {
		work <- i
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// create writes Service i and its slice.
func (c *cluster) create(ctx context.Context, i int, rollers map[int]bool) error {
	svc, err := c.client.CoreV1().Services(newService(i).Namespace).Create(ctx, newService(i), metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("service %d: %w", i, err)
	}
	s, err := c.client.DiscoveryV1().EndpointSlices(svc.Namespace).Create(ctx, c.baseSlice(svc, i, rollers, time.Now()), metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("endpointslice of service %d: %w", i, err)
	}
	if rollers[i] {
		c.mu.Lock()
		c.slices[i] = s
		c.mu.Unlock()
	}
	return nil
}

// changeKind is one of the four changes of the programming-latency run.
type changeKind string

const (
	endpointAdded   changeKind = "endpoint added"
	endpointRemoved changeKind = "endpoint removed"
	serviceCreated  changeKind = "service created"
	serviceDeleted  changeKind = "service deleted"
)

// change is one write of the programming-latency run.
type change struct {
	kind  changeKind
	svc   int           // the Service's index
	ip    netip.Addr    // the endpoint added or removed
	at    time.Duration // when it is written, from the start of the run's changes
	first int           // a removal or deletion waits until this change (its add or create) was seen; -1: none
}

// newSchedule is the run's changes: n/4 Services get an endpoint added and
// later removed, n/4 Services are created and later deleted, the 2*(n/2)
// writes spread over n slots of interval each, at a random moment within
// its slot, in an order drawn from seed (the same for every proxy).
func newSchedule(sz size, n int, interval time.Duration, seed uint64) []change {
	rng := rand.New(rand.NewPCG(seed, uint64(sz.services)))
	pairs := rollingServices(n)
	slots := rng.Perm(4 * pairs)
	type pair struct{ first, second change }
	var all []change
	for p := range 2 * pairs {
		a, b := slots[2*p], slots[2*p+1]
		if a > b {
			a, b = b, a
		}
		var pr pair
		if p < pairs {
			i := sz.rolling(p, pairs)
			ip := sz.addedIP(i, 0)
			pr = pair{change{kind: endpointAdded, svc: i, ip: ip}, change{kind: endpointRemoved, svc: i, ip: ip}}
		} else {
			i := sz.services + p - pairs
			pr = pair{change{kind: serviceCreated, svc: i}, change{kind: serviceDeleted, svc: i}}
		}
		pr.first.at = time.Duration(a)*interval + time.Duration(rng.Int64N(int64(interval)))
		pr.second.at = time.Duration(b)*interval + time.Duration(rng.Int64N(int64(interval)))
		all = append(all, pr.first, pr.second)
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].at < all[j].at })
	for i := range all {
		all[i].first = -1
		if all[i].kind == endpointRemoved || all[i].kind == serviceDeleted {
			for j := range i {
				if all[j].svc == all[i].svc && (all[j].kind == endpointAdded || all[j].kind == serviceCreated) {
					all[i].first = j
				}
			}
		}
	}
	return all
}

// write makes change ch in the API server, stamped with trigger as the
// slice's last-change-trigger-time.
func (c *cluster) write(ctx context.Context, ch change, trigger time.Time) error {
	if err := c.apply(ctx, ch, trigger); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch ch.kind {
	case endpointAdded, serviceCreated:
		c.open[ch.svc] = ch
	default:
		delete(c.open, ch.svc)
	}
	return nil
}

// reset undoes the changes a run left half done (it failed between an
// add and its removal): the next run starts from the same cluster.
func (c *cluster) reset(ctx context.Context) error {
	c.mu.Lock()
	var undo []change
	for _, ch := range c.open {
		undo = append(undo, ch)
	}
	c.mu.Unlock()
	for _, ch := range undo {
		ch.kind = map[changeKind]changeKind{endpointAdded: endpointRemoved, serviceCreated: serviceDeleted}[ch.kind]
		if err := c.write(ctx, ch, time.Now()); err != nil {
			return fmt.Errorf("reset: %w", err)
		}
	}
	return nil
}

// apply is write without the bookkeeping.
func (c *cluster) apply(ctx context.Context, ch change, trigger time.Time) error {
	name, ns := svcName(ch.svc)
	switch ch.kind {
	case endpointAdded, endpointRemoved:
		c.mu.Lock()
		old := c.slices[ch.svc]
		c.mu.Unlock()
		svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: old.OwnerReferences[0].UID}}
		eps := terminating(c.sz.endpointIPs(ch.svc))
		if ch.kind == endpointAdded {
			eps = append(eps, endpoint{ip: ch.ip})
		}
		s := newSlice(svc, eps, trigger)
		s.ResourceVersion = old.ResourceVersion
		s, err := c.client.DiscoveryV1().EndpointSlices(ns).Update(ctx, s, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("%s %s/%s: %w", ch.kind, ns, name, err)
		}
		c.mu.Lock()
		c.slices[ch.svc] = s
		c.mu.Unlock()
	case serviceCreated:
		svc, err := c.client.CoreV1().Services(ns).Create(ctx, newService(ch.svc), metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("%s %s/%s: %w", ch.kind, ns, name, err)
		}
		if _, err := c.client.DiscoveryV1().EndpointSlices(ns).Create(ctx, newSlice(svc, ready(c.sz.endpointIPs(ch.svc)), trigger), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("%s %s/%s: endpointslice: %w", ch.kind, ns, name, err)
		}
	case serviceDeleted:
		if err := c.client.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return fmt.Errorf("%s %s/%s: %w", ch.kind, ns, name, err)
		}
		// As the garbage collector would, a moment later: its owner is gone.
		if err := c.client.DiscoveryV1().EndpointSlices(ns).Delete(ctx, name+"-bench", metav1.DeleteOptions{}); err != nil {
			return fmt.Errorf("%s %s/%s: endpointslice: %w", ch.kind, ns, name, err)
		}
	}
	return nil
}

// probeFor is the client's probe that sees ch in the rules.
func probeFor(ch change) request {
	dst := netip.AddrPortFrom(clusterIP(ch.svc), servicePort).String()
	switch ch.kind {
	case endpointAdded:
		return request{Op: "probe", Kind: "reach", Dst: dst, EP: ch.ip.String()}
	case endpointRemoved:
		return request{Op: "probe", Kind: "leave", Dst: dst, EP: ch.ip.String()}
	case serviceCreated:
		return request{Op: "probe", Kind: "up", Dst: dst}
	default:
		return request{Op: "probe", Kind: "down", Dst: dst}
	}
}
