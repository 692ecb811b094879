package dnsresolve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

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
	// Logger receives loop detections and serving errors. If nil, nothing is logged.
	Logger *slog.Logger
	// Now is the cache's clock. If nil, time.Now is used.
	Now func() time.Time
}

// Server answers DNS questions: the cluster zone from the latest Snapshot's
// Index, everything else through the forwarder. It is a dns.Handler; Serve
// runs it on a UDP and a TCP socket.
type Server struct {
	zone    string
	ttl     uint32
	fwd     *forwarder
	cache   *cache
	metrics *metrics
	log     *slog.Logger

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
	upstreams := make([]string, 0, len(cfg.Upstreams))
	for _, u := range cfg.Upstreams {
		a, err := upstreamAddr(u)
		if err != nil {
			return nil, err
		}
		upstreams = append(upstreams, a)
	}
	s := &Server{zone: zone, ttl: cfg.TTL, metrics: &metrics{}, log: cfg.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	size := orDefault(cfg.CacheSize, DefaultCacheSize)
	s.cache = newCache(size, cfg.Now)
	s.fwd = newForwarder(upstreams, orDefaultDuration(cfg.UpstreamTimeout, DefaultUpstreamTimeout), s.cache, s.metrics, s.log)
	return s, nil
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
// in flight keep the Index they started with.
func (s *Server) Update(snap *service.Snapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// The SOA serial only grows: seconds since the epoch, or one more.
	s.serial = max(s.serial+1, uint32(time.Now().Unix()))
	s.index.Store(NewIndex(snap, IndexConfig{Zone: s.zone, TTL: s.ttl, Serial: s.serial}))
	s.metrics.snapshots.Add(1)
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

// Serve answers queries on pc (UDP) and ln (TCP) until ctx is done, then stops
// reading, waits up to five seconds for queries in flight to be answered, and
// closes both sockets. Once both serve, it probes the upstreams for loops.
func (s *Server) Serve(ctx context.Context, pc net.PacketConn, ln net.Listener) error {
	if ap, err := netip.ParseAddrPort(pc.LocalAddr().String()); err == nil {
		s.fwd.markSelf(ap)
	}
	servers := []*dns.Server{
		{PacketConn: pc, Net: "udp", UDPSize: dns.MaxMsgSize},
		{Listener: ln, Net: "tcp"},
	}
	errc := make(chan error, len(servers))
	started := make(chan struct{}, len(servers))
	var wg sync.WaitGroup
	for _, srv := range servers {
		srv.Handler = s
		srv.MsgAcceptFunc = accept
		srv.MsgInvalidFunc = func([]byte, error) { s.metrics.invalid.Add(1) }
		srv.NotifyStartedFunc = func() { started <- struct{}{} }
		wg.Add(1)
		go runDNSServer(&wg, srv, errc)
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
		wg.Add(1)
		go probeLoops(ctx, &wg, s.fwd)
		select {
		case <-ctx.Done():
		case err = <-errc:
		}
	}

	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
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

// probeLoops sends each upstream a loop probe once, at start.
func probeLoops(ctx context.Context, wg *sync.WaitGroup, f *forwarder) {
	defer wg.Done()
	f.probe(ctx)
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

// HTTPHandler serves /metrics (Prometheus text format) and /healthz (200 once
// the first Snapshot is indexed, 503 before).
func (s *Server) HTTPHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		services := 0
		if ix := s.index.Load(); ix != nil {
			services = ix.Len()
		}
		s.metrics.write(w, services, s.cache.len(), s.Ready())
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.Ready() {
			http.Error(w, "no service snapshot yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}
