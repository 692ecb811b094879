package userspace

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/svcproxy/svcproxy/service"
)

// ErrClosed is returned by Sync after Shutdown.
var ErrClosed = errors.New("userspace proxier is shut down")

// Proxier serves the TCP and UDP ports of the Services in a Snapshot: one listener
// per service port (plus one per NodePort), portals that bring ClusterIP traffic
// to the listeners, and the goroutines that copy the bytes. Create it with New,
// feed it with Sync, stop it with Shutdown (or by cancelling Run's context).
type Proxier struct {
	cfg      Config
	balancer *Balancer // every usable endpoint of each port
	local    *Balancer // the node's own, for the ports with a Local traffic policy

	// ctx is cancelled when the proxier has shut down: it stops every goroutine
	// the proxier owns (accept loops, connections, dials, UDP sessions), which wg
	// counts.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	conns  *connSet      // open TCP connections: what Shutdown waits for
	dialq  chan *tcpConn // idle diallers wait here for the next connection (see dialler)
	kick   chan struct{} // a Sync left something to retry
	self   atomic.Pointer[selfAddrs]

	fds        *fdBudget
	fdRefusals atomic.Uint64 // refused for lack of file descriptors
	bindFails  atomic.Uint64 // listeners that could not be bound
	fdLog      sparseLog

	mu       sync.Mutex
	snap     *service.Snapshot
	ports    map[service.PortName]*servicePort
	nextPort uint16 // next port to try in cfg.PortRange
	synced   bool
	closed   bool
	portals  portalState
	unserved []UnservedPort // of the last Sync, for Status
}

// NewProxier returns a Proxier that serves nothing until the first Sync.
func NewProxier(cfg Config) *Proxier {
	if cfg.Family != service.IPv6 {
		cfg.Family = service.IPv4
	}
	if !cfg.BindAddress.IsValid() {
		cfg.BindAddress = netip.IPv4Unspecified()
		if cfg.Family == service.IPv6 {
			cfg.BindAddress = netip.IPv6Unspecified()
		}
	}
	if cfg.UDPIdleTimeout <= 0 {
		cfg.UDPIdleTimeout = DefaultUDPIdleTimeout
	}
	if cfg.UDPMaxSessions <= 0 {
		cfg.UDPMaxSessions = DefaultUDPMaxSessions
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = DefaultShutdownGrace
	}
	if cfg.NetNS == nil {
		cfg.NetNS = func(fn func() error) error { return fn() }
	}
	if cfg.DialTimeouts == nil {
		cfg.DialTimeouts = defaultDialTimeouts
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Proxier{
		cfg:      cfg,
		balancer: NewBalancer(cfg.Clock),
		local:    NewBalancer(cfg.Clock),
		ctx:      ctx,
		cancel:   cancel,
		conns:    newConnSet(),
		dialq:    make(chan *tcpConn),
		fds:      newFDBudget(),
		fdLog:    sparseLog{every: 10 * time.Second},
		kick:     make(chan struct{}, 1),
		ports:    make(map[service.PortName]*servicePort),
		nextPort: cfg.PortRange.Min,
	}
}

// Sync makes the proxier serve snap: listeners are opened for new service ports
// and closed for removed ones, the Balancer picks from each port's usable
// endpoints, and the portals are rewritten in one iptables-restore.
//
// Established TCP connections are left alone, as kube-proxy's userspace proxier
// leaves them: when their endpoint stops being ready, leaves the EndpointSlice,
// or their Service is deleted, the endpoint is no longer picked, and the
// connections it has finish on it. UDP sessions to an endpoint that stopped
// serving end (see servicePort.setEndpoints), and so do those of a deleted
// Service, whose listener the replies would leave from.
//
// The returned error joins the ports that could not be bound and a failed
// restore; every other port is served. Run retries what failed, with backoff.
func (p *Proxier) Sync(snap *service.Snapshot) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	p.snap = snap
	err := p.syncLocked(p.ctx)
	p.synced = true
	if err != nil {
		p.retryLater()
	}
	return err
}

// retryLater wakes Run to retry what a sync could not do (with backoff).
func (p *Proxier) retryLater() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// served reports whether the proxier serves a service port, and if not, why:
// TCP and UDP ports that have a virtual address of the proxier's family (the
// portals of one family are rules of its iptables) or a node port. A port with
// no address at all (a headless Service) is simply not served, with no reason
// to report. A dual-stack node feeds each family's Proxier only its family's
// view of the Snapshot, where every Service has a ClusterIP of that family.
func served(fam service.Family, port *service.Port, localhost bool) (ok bool, why string) {
	if localhost {
		return servedOnLocalhost(port)
	}
	if port.Protocol != service.TCP && port.Protocol != service.UDP {
		return false, fmt.Sprintf("protocol %s: userspace mode serves TCP and UDP", port.Protocol)
	}
	svc := port.Service
	vips := slices.Concat(svc.ClusterIPs, svc.ExternalIPs, svc.LoadBalancerIPs)
	if port.NodePort != 0 || len(fam.Addrs(vips)) > 0 {
		return true, ""
	}
	if len(vips) > 0 {
		return false, fmt.Sprintf("%s addresses only: this proxier serves %s (a dual-stack node runs one per family)", fam.Other(), fam)
	}
	return false, ""
}

// pickFrom is the Balancer a new connection or UDP session of sp picks its
// endpoint from, as the kernel paths choose: the node's own endpoints for
// traffic whose policy is Local, every usable endpoint otherwise. Traffic is
// external when it came in through the node port listener, where the portals
// also bring external IPs and load-balancer IPs (see Render); but external
// traffic from a pod or from the node itself goes to every endpoint, as
// kube-proxy short-circuits it ("pod traffic for external destinations").
func (p *Proxier) pickFrom(sp *servicePort, external bool, client netip.Addr) *Balancer {
	local := sp.internalLocal.Load()
	if external {
		local = sp.externalLocal.Load() && (p.cfg.LocalhostNodePorts || !p.fromInside(client))
	}
	if local {
		return p.local
	}
	return p.balancer
}

// fromInside reports whether client is a pod (in Config.ClusterCIDR) or the
// node itself.
func (p *Proxier) fromInside(client netip.Addr) bool {
	if p.cfg.ClusterCIDR.Contains(client) {
		return true
	}
	self := p.self.Load()
	return client.IsLoopback() || (self != nil && self.local[client])
}

func (p *Proxier) syncLocked(ctx context.Context) error {
	var want []*service.Port
	p.unserved = p.unserved[:0]
	if p.snap != nil {
		for _, port := range p.snap.Ports() {
			if ok, why := served(p.cfg.Family, port, p.cfg.LocalhostNodePorts); ok {
				want = append(want, port)
			} else if why != "" {
				p.unserved = append(p.unserved, UnservedPort{Name: port.Name.String(), Reason: why})
			}
		}
	}
	seen := make(map[service.PortName]bool, len(want))
	var errs []error
	var opened []listener
	for _, port := range want {
		seen[port.Name] = true
		sp := p.ports[port.Name]
		if sp == nil {
			sp = newServicePort(port.Name)
			p.ports[port.Name] = sp
		}
		sp.setPort(port)
		if p.cfg.LocalhostNodePorts {
			continue // its listener depends on its endpoints: below
		}
		ls, err := p.openListeners(sp)
		opened = append(opened, ls...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	for name, sp := range p.ports {
		if !seen[name] {
			sp.closeListeners() // its open connections stay; see Sync
			p.balancer.Forget(name)
			p.local.Forget(name)
			sp.closeSessions()
			delete(p.ports, name)
		}
	}
	self := p.newSelfAddrs(p.self.Load())
	p.self.Store(self)
	var node *service.Node // this node's Node object, for topology hints
	if p.snap != nil {
		node = p.snap.Node()
	}
	for name, sp := range p.ports {
		refused, changed := sp.setEndpoints(p.balancer, p.local, p.cfg.NodeName, node, func(ep netip.AddrPort) error { return self.check(name.Protocol, ep) })
		if changed {
			for _, r := range refused {
				p.cfg.Logger.Error("endpoint refused", "err", r)
			}
		}
	}
	if p.cfg.LocalhostNodePorts {
		for _, sp := range p.ports {
			ls, err := p.openListeners(sp)
			opened = append(opened, ls...)
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	// New listeners start accepting once the Balancer knows their port: what
	// the kernel queued meanwhile waits in the backlog.
	for _, l := range opened {
		l.start(p)
	}
	if err := p.applyPortals(ctx); err != nil {
		errs = append(errs, err)
	} else if err := p.clearRejected(ctx); err != nil {
		// Not the sync's failure: the next sync tries again.
		p.cfg.Logger.Warn("conntrack cleanup failed", "err", err)
	}
	return errors.Join(errs...)
}

// Run retries failed syncs with backoff (500ms doubling to 30s), restores the
// portals every 30s, and sweeps expired affinity entries, until ctx is
// cancelled; then it shuts the proxier down, giving open connections
// Config.ShutdownGrace to finish, and returns Shutdown's error.
func (p *Proxier) Run(ctx context.Context) error {
	const sweepEvery = 10 * time.Second
	sweep := time.NewTicker(sweepEvery)
	defer sweep.Stop()
	// kube-proxy's --iptables-sync-period (30s): restore the portals even when
	// nothing changed, in case something else flushed them.
	const resyncEvery = 30 * time.Second
	resync := time.NewTicker(resyncEvery)
	defer resync.Stop()
	retry := time.NewTimer(0)
	retry.Stop()
	var backoff backoff
	for {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), p.cfg.ShutdownGrace)
			defer cancel()
			return p.Shutdown(sctx)
		case <-sweep.C:
			p.balancer.Sweep()
		case <-resync.C:
			if err := p.resync(true); err != nil {
				retry.Reset(backoff.next())
			}
		case <-p.kick:
			retry.Reset(backoff.next())
		case <-retry.C:
			if err := p.resync(false); err != nil {
				retry.Reset(backoff.next())
			} else {
				backoff.reset()
			}
		}
	}
}

// resync runs the last Sync again: bind what could not be bound, restore the
// portals that failed, or (force) restore them even if they did not change.
func (p *Proxier) resync(force bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.snap == nil {
		return nil
	}
	if force {
		p.portals.applied = nil
	}
	return p.syncLocked(p.ctx)
}

// backoff doubles from 500ms to 30s.
type backoff struct{ d time.Duration }

func (b *backoff) next() time.Duration {
	b.d = min(max(2*b.d, 500*time.Millisecond), 30*time.Second)
	return b.d
}

func (b *backoff) reset() { b.d = 0 }

// Shutdown stops the proxier:
//
//  1. it stops accepting: the listeners are closed, so a new connection that a
//     portal redirects meets a closed port and is refused at once (a TCP reset,
//     an ICMP port unreachable for UDP). UDP sessions end with their listener:
//     a reply can only leave from it;
//  2. it lets open TCP connections finish until ctx is done, then resets the
//     ones left and cancels the dials still in progress;
//  3. only then it removes the portals. They stay until the connections are
//     over because the kernel translates an established redirected connection
//     through conntrack, and with iptables-nft conntrack runs in a namespace
//     only while some rule needs it: removing the last such rules at once would
//     freeze every open connection (no FIN, no reset) until its client gave up.
//
// It returns ctx's error if connections had to be cut, or the error of
// removing the portals. Shutdown is safe to call more than once.
func (p *Proxier) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return nil
	}
	p.closed = true
	for _, sp := range p.ports {
		sp.closeListeners()
	}
	p.mu.Unlock()

	var err error
	select {
	case <-p.conns.close():
	case <-ctx.Done():
		err = fmt.Errorf("closing open connections: %w", ctx.Err())
		p.cancel() // dials in progress end now
		p.conns.abortAll()
		<-p.conns.close()
	}
	p.cancel()
	p.wg.Wait()

	if p.cfg.IPTables != nil {
		// The grace period may be over: removing the portals gets time of its own.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		err = errors.Join(err, p.cfg.NetNS(func() error { return Cleanup(cctx, p.cfg.IPTables) }))
	}
	return err
}

// cleanupTimeout bounds the removal of the portals at shutdown: a few
// iptables-save and iptables-restore runs.
const cleanupTimeout = 10 * time.Second
