package dnsresolve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/service"
)

// Defaults for the zero values of Config.
const (
	// DefaultUpstreamTimeout bounds one exchange with one upstream. Two seconds
	// leave room for a second upstream before a glibc client (5s) gives up.
	DefaultUpstreamTimeout = 2 * time.Second
	// DefaultCacheSize is how many forwarded answers the cache holds.
	DefaultCacheSize = 10000
	// shutdownGrace is how long Serve waits for queries in flight on shutdown.
	shutdownGrace = 5 * time.Second
	// serverUDPSize is the EDNS0 buffer size we advertise (CoreDNS's default).
	serverUDPSize = 1232
)

// Config configures a Server.
type Config struct {
	// Zone is the cluster domain; empty means "cluster.local".
	Zone string
	// TTL of every record in the zone, and of its negative answers.
	TTL uint32
	// Upstreams receive every question outside the zone, tried in order:
	// "IP", "IP:port" or "host:port". None: such questions are REFUSED.
	Upstreams []string
	// UpstreamTimeout bounds one exchange with one upstream; zero means
	// DefaultUpstreamTimeout.
	UpstreamTimeout time.Duration
	// CacheSize is how many forwarded answers to keep; zero means
	// DefaultCacheSize, negative disables the cache.
	CacheSize int
	// MaxConcurrent bounds the queries waiting for upstreams; beyond it a
	// query is answered REFUSED at once. Zero means DefaultMaxConcurrent.
	MaxConcurrent int
	// MaxFails is how many exchanges in a row may fail before an upstream is
	// marked down. Zero means DefaultMaxFails, negative never.
	MaxFails int
	// HealthCheckInterval, LoopCheckInterval and LoopLogInterval are the
	// periods of the forwarder's background checks; zero means the Default
	// of each.
	HealthCheckInterval time.Duration
	LoopCheckInterval   time.Duration
	LoopLogInterval     time.Duration
	// Forward says how names go upstream beyond the above: CoreDNS's
	// forward options. Its zero value is clusterdns's flags' forwarding.
	Forward ForwardOptions
	// Cache configures the cache of forwarded answers as CoreDNS's cache
	// plugin's options do. nil: CacheSize entries, kept for their TTL (at
	// most an hour), NOERROR and NXDOMAIN only.
	Cache *CacheOptions
	// LoadBalance shuffles the address records of every answer, as
	// CoreDNS's loadbalance plugin (round_robin) does.
	LoadBalance bool
	// LogErrors logs every query answered SERVFAIL because of an error, at
	// error level, as CoreDNS's errors plugin does; without it at debug.
	LogErrors bool
	// NSAddrs are the addresses of ns.dns.<zone>, the name the zone's NS and
	// SOA records give for this server (see IndexConfig).
	NSAddrs []netip.Addr
	// Pods: PodsInsecure (the default, as kubeadm's Corefile), PodsVerified
	// (the Snapshots must carry PodIPs) or PodsDisabled.
	Pods PodMode
	// ReverseZones and Namespaces: see IndexConfig.
	ReverseZones []string
	Namespaces   []string
	// Fallthrough are the zones whose names the Index has not (NXDOMAIN) go
	// to the upstreams instead, as the kubernetes plugin's fallthrough
	// option says: ["."] for every zone. nil means the reverse zones
	// (kubeadm's "fallthrough in-addr.arpa ip6.arpa"); empty, none.
	Fallthrough []string
	// LogQueries logs one line per query: client, name, type, rcode, duration.
	LogQueries bool
	// Registry receives the Server's metrics. If nil, the Server makes its
	// own; either way HTTPHandler serves it.
	Registry *prometheus.Registry
	// Metrics, when not nil, are the process's metrics, registered already
	// (NewMetrics): Servers made one after another (a reloaded Corefile)
	// count into the same ones. nil: NewMetrics(Registry).
	Metrics *Metrics
	// MetricLabels are the values of CoreDNS's labels; the zero value is
	// kubeadm's Corefile's.
	MetricLabels MetricLabels
	// Logger receives loop detections and serving errors. If nil, nothing is logged.
	Logger *slog.Logger
	// Now is the cache's clock. If nil, time.Now is used.
	Now func() time.Time
}

// Server answers DNS questions: the cluster zone from the latest Snapshot's
// Index, everything else through the forwarder. It is a dns.Handler; Serve
// runs it on a UDP and a TCP socket.
type Server struct {
	zone       string
	ttl        uint32
	nsAddrs    []netip.Addr
	pods       PodMode
	logQueries bool

	loadBalance, logErrors bool

	reverseZones, namespaces []string
	fallZones                []string // lower-case FQDNs

	checks   checkIntervals
	fwd      *forwarder
	cache    *cache
	metrics  *serverMetrics
	registry *prometheus.Registry
	log      *slog.Logger

	index  atomic.Pointer[Index] // nil until the first Update
	mu     sync.Mutex            // serializes Update
	serial uint32
}

// New returns a Server that is not ready (answers SERVFAIL in the zone) until
// its first Update.
func New(cfg Config) (*Server, error) {
	zone := DefaultZone
	if cfg.Zone != "" {
		zone = dns.CanonicalName(cfg.Zone)
		if _, ok := dns.IsDomainName(zone); !ok || zone == "." {
			return nil, fmt.Errorf("zone %q: not a domain name", cfg.Zone)
		}
	}
	switch cfg.Pods {
	case "", PodsInsecure, PodsVerified, PodsDisabled:
	default:
		return nil, fmt.Errorf("pods %q: want %q, %q or %q", cfg.Pods, PodsInsecure, PodsVerified, PodsDisabled)
	}
	fall := cfg.Fallthrough
	if fall == nil {
		fall = cfg.ReverseZones
		if fall == nil {
			fall = defaultReverseZones
		}
	}
	upstreams := make([]string, 0, len(cfg.Upstreams))
	for _, u := range cfg.Upstreams {
		a, err := upstreamAddr(u)
		if err != nil {
			return nil, err
		}
		upstreams = append(upstreams, a)
	}
	switch cfg.Forward.Policy {
	case "", "sequential", "random", "round_robin":
	default:
		return nil, fmt.Errorf("forward policy %q: want sequential, random or round_robin", cfg.Forward.Policy)
	}
	s := &Server{zone: zone, ttl: cfg.TTL, nsAddrs: cfg.NSAddrs, pods: cfg.Pods, logQueries: cfg.LogQueries,
		loadBalance: cfg.LoadBalance, logErrors: cfg.LogErrors,
		reverseZones: canonicalOrNil(cfg.ReverseZones), namespaces: cfg.Namespaces, fallZones: canonical(fall),
		registry: cfg.Registry, log: cfg.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.registry == nil {
		s.registry = prometheus.NewRegistry()
	}
	s.checks = checkIntervals{
		health:  orDefaultDuration(cfg.HealthCheckInterval, DefaultHealthCheckInterval),
		loop:    orDefaultDuration(cfg.LoopCheckInterval, DefaultLoopCheckInterval),
		loopLog: orDefaultDuration(cfg.LoopLogInterval, DefaultLoopLogInterval),
	}
	copts := cfg.Cache
	if copts == nil {
		copts = legacyCache(orDefault(cfg.CacheSize, DefaultCacheSize))
	}
	s.cache = newCache(copts, cfg.Now)
	s.fwd = newForwarder(upstreams, forwarderConfig{
		timeout:       orDefaultDuration(cfg.UpstreamTimeout, DefaultUpstreamTimeout),
		maxFails:      maxFails(cfg.MaxFails),
		maxConcurrent: max(1, orDefault(cfg.MaxConcurrent, DefaultMaxConcurrent)),
		opts:          cfg.Forward,
	}, s.cache, s.log)
	m := cfg.Metrics
	if m == nil {
		m = NewMetrics(s.registry)
	}
	s.metrics = newServerMetrics(m, newServerLabels(cfg.MetricLabels))
	s.fwd.metrics = s.metrics
	s.cache.onEvict = func(kind int) { s.metrics.cacheEvictions[kind].Inc() }
	m.current.CompareAndSwap(nil, s) // the first; a later one when it serves
	return s, nil
}

// canonicalOrNil is canonical, keeping nil nil (IndexConfig's default).
func canonicalOrNil(zones []string) []string {
	if zones == nil {
		return nil
	}
	return canonical(zones)
}

// canonical is zones as lower-case FQDNs.
func canonical(zones []string) []string {
	out := make([]string, len(zones))
	for i, z := range zones {
		out[i] = dns.CanonicalName(z)
	}
	return out
}

// maxFails is cfg.MaxFails as the forwarder counts: 0 the default, negative
// never (CoreDNS's "max_fails 0": an upstream is never marked down).
func maxFails(n int) uint32 {
	switch {
	case n < 0:
		return math.MaxUint32
	case n == 0:
		return DefaultMaxFails
	}
	return uint32(n)
}

func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

func orDefaultDuration(v, def time.Duration) time.Duration {
	if v <= 0 {
		return def
	}
	return v
}

// Update indexes snap and makes it the answer to every later question. Queries
// in flight keep the Index they started with. The Snapshot already indexed
// (a resync that found nothing new hands over the same one) costs nothing.
// It reports whether it built a new Index.
func (s *Server) Update(snap *service.Snapshot) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ix := s.index.Load(); ix != nil && ix.snap == snap {
		return false
	}
	// The SOA serial only grows: seconds since the epoch, or one more.
	s.serial = max(s.serial+1, uint32(time.Now().Unix()))
	s.index.Store(NewIndex(snap, IndexConfig{Zone: s.zone, TTL: s.ttl, Serial: s.serial, NSAddrs: s.nsAddrs, Pods: s.pods,
		ReverseZones: s.reverseZones, Namespaces: s.namespaces}))
	s.metrics.snapshots.Inc()
	s.metrics.observeProgramming(snap, time.Now())
	return true
}

// Ready reports whether a Snapshot has been indexed.
func (s *Server) Ready() bool { return s.index.Load() != nil }

// Listen opens the UDP and TCP sockets of addr on the same port; for port 0 the
// kernel picks one that is free for both.
func Listen(addr string) (net.PacketConn, net.Listener, error) {
	for attempt := 0; ; attempt++ {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("listen udp %s: %w", addr, err)
		}
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, ln, nil
		}
		pc.Close()
		if _, port, _ := net.SplitHostPort(addr); (port != "0" && port != "") || attempt == 9 {
			return nil, nil, fmt.Errorf("listen tcp %s: %w", addr, err)
		}
	}
}

// ListenReusePort is Listen with SO_REUSEPORT on both sockets, as CoreDNS
// listens: another process of the same user may open the same address (a
// new clusterdns beside the old one), and the kernel spreads queries over
// both; one of another user may not. A query waiting in a socket's queue
// when it closes is lost, so a reload keeps its sockets instead (see
// cmd/clusterdns).
func ListenReusePort(addr string) (net.PacketConn, net.Listener, error) {
	lc := net.ListenConfig{Control: ReusePort}
	pc, err := lc.ListenPacket(context.Background(), "udp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listen udp %s: %w", addr, err)
	}
	ln, err := lc.Listen(context.Background(), "tcp", pc.LocalAddr().String())
	if err != nil {
		pc.Close()
		return nil, nil, fmt.Errorf("listen tcp %s: %w", addr, err)
	}
	return pc, ln, nil
}

// ReusePort sets SO_REUSEPORT on a socket before it is bound: a
// net.ListenConfig's Control.
func ReusePort(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	}); err != nil {
		return err
	}
	return serr
}

// Serve answers queries on pc (UDP) and ln (TCP) until ctx is done, then stops
// reading, waits up to five seconds for queries in flight to be answered, and
// closes both sockets. Once both serve, it probes the upstreams for loops.
//
// Stopping leaves in the sockets' queues what it has not read: datagrams
// and connections not accepted yet. Another Server reading the same sockets
// (cmd/clusterdns hands them to the next configuration on a reload) answers
// those; a TCP connection this one accepted gets the answer to the query
// it sent first (see drainListener).
func (s *Server) Serve(ctx context.Context, pc net.PacketConn, ln net.Listener) error {
	if ap, err := netip.ParseAddrPort(pc.LocalAddr().String()); err == nil {
		s.fwd.markSelf(ap)
	}
	s.metrics.current.Store(s) // the gauges are this Server's from now on
	tcp := &dns.Server{Listener: ln, Net: "tcp"}
	drain := newDrainListener(ln)
	if drain != nil {
		tcp.Listener = drain
	}
	// A query is read into a buffer of the size our OPT advertises (RFC
	// 6891 6.2.3: a requestor sends no more than that). Each query in
	// flight holds one: with 64 KiB buffers a burst of 100 queries held
	// 6.5 MiB.
	udp := &dns.Server{PacketConn: pc, Net: "udp", UDPSize: serverUDPSize}
	if c, ok := pc.(*net.UDPConn); ok {
		// Read through udpConn into pooled buffers (udp.go), without
		// the allocations of miekg/dns's sessions. UDPSize then sizes
		// only buffers miekg/dns does not read into; left at its default
		// it differs from ours, and miekg/dns leaves ours to us instead
		// of putting them in its own pool.
		uc, err := newUDPConn(c)
		if err != nil {
			pc.Close()
			ln.Close()
			return fmt.Errorf("serve dns udp: %w", err)
		}
		udp.PacketConn, udp.UDPSize = uc, 0
		udp.DecorateReader = func(r dns.Reader) dns.Reader { return udpReader{r} }
	}
	servers := []*dns.Server{udp, tcp}
	errc := make(chan error, len(servers))
	started := make(chan struct{}, len(servers))
	tcpDone := make(chan struct{})
	var wg sync.WaitGroup
	for _, srv := range servers {
		srv.Handler = s
		srv.MsgAcceptFunc = accept
		srv.MsgInvalidFunc = func([]byte, error) { s.metrics.invalid.Inc() }
		srv.NotifyStartedFunc = func() { started <- struct{}{} }
		wg.Add(1)
		go func() {
			if srv == tcp {
				defer close(tcpDone)
			}
			runDNSServer(&wg, srv, errc)
		}()
	}

	var err error
	for range servers {
		select {
		case <-started:
		case err = <-errc:
		case <-ctx.Done():
		}
		if err != nil || ctx.Err() != nil {
			break
		}
	}
	if err == nil && ctx.Err() == nil {
		wg.Go(func() { s.fwd.runChecks(ctx, s.checks) })
		select {
		case <-ctx.Done():
		case err = <-errc:
		}
	}

	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if drain != nil {
		// The TCP server returns once its connections have answered.
		drain.drain()
		select {
		case <-tcpDone:
		case <-sctx.Done():
		}
	}
	for _, srv := range servers {
		_ = srv.ShutdownContext(sctx) // "server not started" when it failed to
	}
	pc.Close()
	ln.Close()
	wg.Wait()
	return err
}

// runDNSServer serves one socket until its Server is shut down.
func runDNSServer(wg *sync.WaitGroup, srv *dns.Server, errc chan<- error) {
	defer wg.Done()
	if err := srv.ActivateAndServe(); err != nil && !errors.Is(err, net.ErrClosed) {
		errc <- fmt.Errorf("serve dns %s: %w", srv.Net, err)
	}
}

// accept is miekg/dns's DefaultMsgAcceptFunc without NOTIFY: we are no
// secondary, so NOTIFY is not implemented.
func accept(dh dns.Header) dns.MsgAcceptAction {
	const qr = 1 << 15
	if dh.Bits&qr == 0 && int(dh.Bits>>11)&0xF == dns.OpcodeNotify {
		return dns.MsgRejectNotImplemented
	}
	return dns.DefaultMsgAcceptFunc(dh)
}

// HTTPHandler serves /metrics (the Prometheus registry) and /healthz: 200
// once the first Snapshot is indexed and while no forwarding loop is known,
// 503 otherwise, with the reason.
func (s *Server) HTTPHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := s.Healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// Healthy returns nil when the Server is ready and forwards without a loop.
func (s *Server) Healthy() error {
	if !s.Ready() {
		return errors.New("no service snapshot yet")
	}
	if l := s.fwd.looping(); len(l) > 0 {
		return fmt.Errorf("forwarding loop through upstream %s", strings.Join(l, ", "))
	}
	return nil
}
