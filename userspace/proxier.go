package userspace

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/svcproxy/svcproxy/dataplane"
	"github.com/svcproxy/svcproxy/kernel/conntrack"
	"github.com/svcproxy/svcproxy/kernel/iptables"
	"github.com/svcproxy/svcproxy/service"
)

// Defaults of Config.
const (
	// DefaultUDPIdleTimeout is kube-proxy's --udp-timeout default (250ms): a UDP
	// session with no traffic for that long is closed.
	DefaultUDPIdleTimeout = 250 * time.Millisecond
	// DefaultShutdownGrace is how long Run lets open connections finish after its
	// context is cancelled.
	DefaultShutdownGrace = 5 * time.Second
	// DefaultUDPMaxSessions is how many UDP sessions a listener holds at most:
	// kube-proxy's --conntrack-max-per-core default, the number of flows its
	// kernel paths are sized for per core. Each session is a socket: the file
	// limit may bind first (see Proxier.FDExhausted).
	DefaultUDPMaxSessions = 32768
)

// ErrClosed is returned by Sync after Shutdown.
var ErrClosed = errors.New("userspace proxier is shut down")

// Config configures userspace mode and its Proxier. The zero value is
// usable: IPv4, listeners on kernel-chosen ports of 0.0.0.0, no portals, the
// wall clock.
type Config struct {
	// Node is the node served. Of its fields the Proxier reads:
	//   - Family: IPv4 (also when empty) or IPv6. A dual-stack node runs one
	//     Proxier per family, each fed its family's view of the Snapshot and
	//     given its family's IPTables (ip6tables for IPv6). An IPv6
	//     Proxier's listeners are IPv6-only sockets, so both families'
	//     listeners may have the same port.
	//   - NodeName: an endpoint on this node is local. The traffic policies
	//     apply as in the kernel paths: internalTrafficPolicy Local sends
	//     what comes in through a ClusterIP to the local endpoints only,
	//     externalTrafficPolicy Local does the same for the node port,
	//     external IPs and load-balancer IPs; with no local endpoint such a
	//     connection is reset (the kernel drops it).
	//   - ClusterCIDR: the pods' addresses. External traffic from a pod, or
	//     from the node itself, goes to every usable endpoint even with
	//     externalTrafficPolicy Local, as kube-proxy short-circuits it: only
	//     traffic from outside the cluster is kept on the node.
	//   - NodeIP: a LoadBalancer whose loadBalancerSourceRanges hold it also
	//     accepts its own IPs as sources (service.FirewallSources).
	// NodePorts listen on every address (BindAddress); the masquerade fields
	// are the kernel paths'.
	dataplane.Node

	// Carries, if not nil, names the service ports whose new connections
	// this Proxier takes: the others get no portal (and no REJECT rule),
	// hybrid mode having promoted them to a kernel path, whose rules then
	// decide alone. Their listeners stay open, so a connection a portal
	// brought in before finishes here (conntrack keeps sending it to the
	// listener); so do their NodePort listeners, which a kernel DNAT of the
	// node port passes by. Call ApplyPortals after its answer changes.
	Carries func(service.PortName) bool

	// BindAddress is the address the listeners bind, of Family. If invalid (the
	// zero netip.Addr), 0.0.0.0 (:: for IPv6): REDIRECT sends packets to the
	// address of the interface they came in on (127.0.0.1 or ::1 for the node's
	// own packets), so only a wildcard listener is reached from everywhere.
	BindAddress netip.Addr

	// PortRange is where listener ports come from (--proxy-port-range). The zero
	// value lets the kernel choose.
	PortRange PortRange

	// UDPIdleTimeout closes a UDP session after this much silence. If zero,
	// DefaultUDPIdleTimeout.
	UDPIdleTimeout time.Duration

	// UDPMaxSessions is how many UDP sessions (client addresses) each UDP
	// listener holds at most; a new client beyond it ends the session idle
	// longest. If zero, DefaultUDPMaxSessions.
	UDPMaxSessions int

	// ShutdownGrace is how long Run, when its context ends, lets open connections
	// finish before closing them. If zero, DefaultShutdownGrace.
	ShutdownGrace time.Duration

	// IPTables receives the portals. If nil, no portals are installed: clients must
	// connect to the listeners themselves (Status says where they are).
	IPTables iptables.Interface

	// NetNS runs fn where the proxier's sockets and iptables calls belong. If nil,
	// fn is called directly (svcproxy runs inside the namespace it serves). Tests
	// pass netnstest.NS.Do: a socket made inside keeps its namespace, and so do the
	// iptables processes started from that thread.
	NetNS func(fn func() error) error

	// Clock drives session affinity. If nil, the wall clock.
	Clock Clock

	// Conntrack, if not nil, deletes the UDP conntrack entries of a port
	// whose portal became a REJECT, so that a client that keeps sending is
	// refused instead of kept on the listener (see clearRejected). If nil,
	// those entries stay until their client goes quiet.
	Conntrack conntrack.Interface

	// Logger receives what happens away from any caller: running out of file
	// descriptors (at most one line per 10s), endpoints refused as loops. If
	// nil, nothing is logged.
	Logger *slog.Logger

	// LocalhostNodePorts makes the Proxier serve only the TCP node ports, on
	// BindAddress (the family's loopback address, 127.0.0.1 or ::1), with no
	// listener per service port and no portals: nftables mode's localhost
	// NodePorts (KEP-6032; kube-proxy's pkg/proxy/localnodeportproxy,
	// whose nftables table rejects the other protocols there). A node port
	// has a listener only while it has an endpoint to send to, for
	// externalTrafficPolicy Local one on this node (kube-proxy's
	// SyncNodePorts skips a NodePort without endpoints): without one the
	// connection is refused. Its traffic is external, and a Local policy
	// holds for it although it comes from the node itself: kube-proxy's
	// localhost proxy picks from the local endpoints too.
	LocalhostNodePorts bool

	// DialTimeouts are the timeouts of successive attempts to reach an endpoint of
	// a TCP service port; each attempt may pick another endpoint. If nil,
	// kube-proxy's tryConnect timeouts: 250ms, 500ms, 1s, 2s.
	DialTimeouts []time.Duration

	// LagBound is how long a Snapshot may wait to be served before the
	// mode's Healthy fails (dataplane.Record; 0: the default).
	LagBound time.Duration
}

// carries reports whether the Proxier takes name's new connections
// (Config.Carries).
func (c *Config) carries(name service.PortName) bool { return c.Carries == nil || c.Carries(name) }

// kube-proxy's tryConnect (pkg/proxy/userspace/proxysocket.go): 250ms, 500ms, 1s, 2s.
var defaultDialTimeouts = []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second}

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

// openListeners binds what sp is missing: its listener and, when its NodePort
// changed, the node port listener. It returns the new listeners, not yet
// serving. A failure is recorded on sp (Status shows it) and returned; the other
// ports are not affected.
func (p *Proxier) openListeners(sp *servicePort) ([]listener, error) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	var opened []listener
	var errs []error
	if sp.listener == nil && !p.cfg.LocalhostNodePorts {
		l, err := p.listen(sp, 0, false)
		if err != nil {
			p.bindFails.Add(1)
			errs = append(errs, fmt.Errorf("listener: %w", err))
		} else {
			sp.listener = l
			opened = append(opened, l)
		}
	}
	nodePort := sp.port.NodePort
	if p.cfg.LocalhostNodePorts && !p.hasEndpoints(sp) {
		nodePort = 0 // no endpoint to send to: refused, as kube-proxy's SyncNodePorts leaves it
	}
	if sp.nodePort != nil && sp.nodePort.port() != nodePort {
		sp.nodePort.close()
		sp.nodePort = nil
	}
	if sp.nodePort == nil && nodePort != 0 {
		l, err := p.listen(sp, nodePort, true)
		if err != nil {
			p.bindFails.Add(1)
			errs = append(errs, fmt.Errorf("nodePort %d: %w", nodePort, err))
		} else {
			sp.nodePort = l
			opened = append(opened, l)
		}
	}
	sp.err = nil
	if len(errs) > 0 {
		sp.err = fmt.Errorf("service port %s: %w", sp.name, errors.Join(errs...))
	}
	return opened, sp.err
}

// listener is a bound TCP or UDP socket serving one service port.
type listener interface {
	port() uint16
	// start serves the listener, in goroutines the proxier owns, until close.
	start(p *Proxier)
	close()
}

// listen binds a listener for sp on port, or on a port from the range (or the
// kernel's choice) when port is 0. An external listener (the node port's) takes
// the traffic that externalTrafficPolicy governs.
func (p *Proxier) listen(sp *servicePort, port uint16, external bool) (listener, error) {
	if port != 0 || p.cfg.PortRange.IsZero() {
		return p.listenOn(sp, port, external)
	}
	r := p.cfg.PortRange
	var lastErr error
	for range r.Size() {
		port := p.nextPort
		p.nextPort++
		if p.nextPort > r.Max || p.nextPort < r.Min { // past the end, or wrapped at 65535
			p.nextPort = r.Min
		}
		l, err := p.listenOn(sp, port, external)
		if err == nil {
			return l, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("no free port in range %s: %w", r, lastErr)
}

func (p *Proxier) listenOn(sp *servicePort, port uint16, external bool) (listener, error) {
	addr := netip.AddrPortFrom(p.cfg.BindAddress, port)
	switch sp.name.Protocol {
	case service.TCP:
		var ln *net.TCPListener
		err := p.cfg.NetNS(func() (err error) {
			// An IPv6 address makes an IPv6-only socket ("tcp6", IPV6_V6ONLY):
			// the IPv4 Proxier's listener may have the same port.
			ln, err = listenTCP(addr)
			return err
		})
		if err != nil {
			return nil, err
		}
		return &tcpListener{ln: ln, sp: sp, external: external}, nil
	case service.UDP:
		return p.newUDPListener(sp, addr, external)
	}
	return nil, fmt.Errorf("protocol %s: not supported", sp.name.Protocol)
}

// network is "tcp4" or "tcp6" (proto "tcp"), "udp4" or "udp6" (proto "udp"):
// the network of the proxier's family.
func (p *Proxier) network(proto string) string {
	if p.cfg.Family == service.IPv6 {
		return proto + "6"
	}
	return proto + "4"
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
