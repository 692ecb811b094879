package healthcheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/svcproxy/svcproxy/service"
)

// Config configures a Server.
type Config struct {
	// NodeName is this node: endpoints with this NodeName are local.
	NodeName string
	// Addresses are where to listen (kube-proxy's --nodeport-addresses). Empty:
	// every address of the namespace.
	Addresses []netip.Addr
	// ProxyHealthy, if not nil, reports whether the proxy itself is healthy; when
	// it returns an error every health check answers 503 (kube-proxy's
	// serviceProxyHealthy), so load balancers move away from a node whose rules
	// are stale.
	ProxyHealthy func() error
}

// Server serves the health checks of the Snapshot's Local-policy Services.
type Server struct {
	cfg Config

	mu       sync.Mutex
	services map[service.NamespacedName]*check
	byPort   map[uint16]*check
	errs     map[uint16]error // ports that could not be opened, for Status
}

// check is one Service's health check: its port, listeners and current count.
type check struct {
	name      service.NamespacedName
	port      uint16
	servers   []*http.Server
	mu        sync.Mutex
	endpoints int
}

// New returns a Server with no health checks; Sync opens them.
func New(cfg Config) *Server {
	return &Server{cfg: cfg, services: map[service.NamespacedName]*check{}, byPort: map[uint16]*check{}, errs: map[uint16]error{}}
}

// Sync makes the Server answer for snap: a listener per health check port, the
// local endpoint counts of now. A port that cannot be opened (in use) is an error
// naming the Service and the port; the others still serve, and the next Sync tries
// again.
func (s *Server) Sync(snap *service.Snapshot) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	want := map[service.NamespacedName]*service.Service{}
	for _, svc := range snap.Services() {
		if svc.HealthCheckNodePort != 0 && svc.ExternalPolicyLocal {
			want[svc.NamespacedName] = svc
		}
	}
	for name, c := range s.services {
		if svc, ok := want[name]; !ok || svc.HealthCheckNodePort != c.port {
			c.close()
			delete(s.services, name)
			delete(s.byPort, c.port)
		}
	}
	var errs []error
	clear(s.errs)
	for _, name := range sortedNames(want) {
		svc := want[name]
		c := s.services[name]
		if c == nil {
			if other := s.byPort[svc.HealthCheckNodePort]; other != nil {
				err := fmt.Errorf("service %s: spec.healthCheckNodePort %d: already used by %s", name, svc.HealthCheckNodePort, other.name)
				s.errs[svc.HealthCheckNodePort] = err
				errs = append(errs, err)
				continue
			}
			var err error
			c, err = s.open(name, svc.HealthCheckNodePort)
			if err != nil {
				s.errs[svc.HealthCheckNodePort] = err
				errs = append(errs, err)
				continue
			}
			s.services[name], s.byPort[c.port] = c, c
		}
		c.mu.Lock()
		c.endpoints = LocalEndpoints(svc, s.cfg.NodeName)
		c.mu.Unlock()
	}
	return errors.Join(errs...)
}

// LocalEndpoints is what a health check reports: the Service's ready endpoints on
// node, each address counted once whatever its ports.
func LocalEndpoints(svc *service.Service, node string) int {
	n := 0
	for _, e := range svc.Endpoints {
		if e.Ready && e.NodeName == node {
			n++
		}
	}
	return n
}

// open listens on port at each configured address (or all of them) and serves.
func (s *Server) open(name service.NamespacedName, port uint16) (*check, error) {
	c := &check{name: name, port: port}
	addrs := []string{":" + strconv.Itoa(int(port))}
	if len(s.cfg.Addresses) > 0 {
		addrs = nil
		for _, a := range s.cfg.Addresses {
			addrs = append(addrs, netip.AddrPortFrom(a, port).String())
		}
	}
	for _, addr := range addrs {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			c.close()
			return nil, fmt.Errorf("service %s: spec.healthCheckNodePort %d: %w", name, port, err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.serve(c, w) }),
			ReadHeaderTimeout: 5 * time.Second}
		c.servers = append(c.servers, srv)
		go serveHealthCheck(srv, ln) // ends when close shuts srv down
	}
	return c, nil
}

// serveHealthCheck is one listener's HTTP server, named for stack dumps.
func serveHealthCheck(srv *http.Server, ln net.Listener) { _ = srv.Serve(ln) }

func (c *check) close() {
	for _, srv := range c.servers {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = srv.Shutdown(ctx)
		cancel()
	}
}

// response is kube-proxy's health check body.
type response struct {
	Service struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"service"`
	LocalEndpoints      int  `json:"localEndpoints"`
	ServiceProxyHealthy bool `json:"serviceProxyHealthy"`
}

func (s *Server) serve(c *check, w http.ResponseWriter) {
	c.mu.Lock()
	n := c.endpoints
	c.mu.Unlock()
	var body response
	body.Service.Namespace, body.Service.Name = c.name.Namespace, c.name.Name
	body.LocalEndpoints = n
	body.ServiceProxyHealthy = s.cfg.ProxyHealthy == nil || s.cfg.ProxyHealthy() == nil
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Load-Balancing-Endpoint-Weight", strconv.Itoa(n))
	if n == 0 || !body.ServiceProxyHealthy {
		w.WriteHeader(http.StatusServiceUnavailable)
	} else {
		w.WriteHeader(http.StatusOK)
	}
	_ = json.NewEncoder(w).Encode(body)
}

// Status is what /status shows: each health check's port and count, and the
// ports that could not be opened.
type Status struct {
	Service        string `json:"service"`
	Port           uint16 `json:"port"`
	LocalEndpoints int    `json:"localEndpoints,omitempty"`
	Error          string `json:"error,omitempty"`
}

// Status returns the health checks, sorted by port.
func (s *Server) Status() []Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Status
	for port, c := range s.byPort {
		c.mu.Lock()
		out = append(out, Status{Service: c.name.String(), Port: port, LocalEndpoints: c.endpoints})
		c.mu.Unlock()
	}
	for port, err := range s.errs {
		out = append(out, Status{Port: port, Error: err.Error()})
	}
	slices.SortFunc(out, func(a, b Status) int { return int(a.Port) - int(b.Port) })
	return out
}

// Close stops every health check listener.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, c := range s.services {
		c.close()
		delete(s.services, name)
		delete(s.byPort, c.port)
	}
}

func sortedNames(m map[service.NamespacedName]*service.Service) []service.NamespacedName {
	out := make([]service.NamespacedName, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b service.NamespacedName) int {
		if a.Namespace != b.Namespace {
			if a.Namespace < b.Namespace {
				return -1
			}
			return 1
		}
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}
