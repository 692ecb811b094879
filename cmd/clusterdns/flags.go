package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/svcproxy/svcproxy/dnsresolve"
	"github.com/svcproxy/svcproxy/service/watch"
)

// Config is everything the flags say; run takes it and nothing else.
type Config struct {
	// Conf is CoreDNS's -conf: a Corefile that says the rest (corefile.go).
	Conf             string
	ServicesFile     string
	ServicesMaxBytes int64
	Kubeconfig       string
	Listen           string
	Advertise        []netip.Addr // empty: the listen address, or the host's
	Zone             string
	Pods             dnsresolve.PodMode
	Upstreams        []string // empty: from ResolvConf
	ResolvConf       string
	TTL              uint32
	UpstreamTimeout  time.Duration
	MaxConcurrent    int
	CacheSize        int
	LogQueries       bool
	MetricsAddr      string
	Profiling        bool
	LogLevel         string
}

// parseFlags reads args into a Config, checking what can be checked before
// anything runs.
func parseFlags(args []string) (*Config, error) {
	c := &Config{}
	fs := flag.NewFlagSet("clusterdns", flag.ContinueOnError)
	fs.StringVar(&c.Conf, "conf", "", "serve what this Corefile `FILE` asks, as CoreDNS's -conf (kubeadm's coredns Deployment passes -conf /etc/coredns/Corefile); the flags it covers are refused beside it")
	fs.StringVar(&c.ServicesFile, "services", "", "Kubernetes manifests `FILE` (Services, EndpointSlices, Endpoints), reloaded when it changes")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "watch the API server of this kubeconfig `FILE`; without --services or --kubeconfig, the in-cluster config")
	fs.Int64Var(&c.ServicesMaxBytes, "services-max-bytes", watch.DefaultMaxFileBytes, "refuse a --services file larger than this many `BYTES`, keeping the last good state")
	fs.StringVar(&c.Listen, "listen", ":53", "answer on this UDP and TCP `ADDR`ess")
	advertise := fs.String("advertise-address", "", "the address(es) of ns.dns.<zone>, the name server the zone's NS and SOA records name, `IP[,IP]` (default: the --listen address, or the host's addresses when it is unspecified)")
	pods := fs.String("pods", string(dnsresolve.PodsInsecure), "<a-b-c-d>.<namespace>.pod.<zone>: insecure (answer the address the name spells, kubeadm's default), verified (only when a pod in that namespace has it) or disabled (NXDOMAIN)")
	fs.StringVar(&c.Zone, "zone", "cluster.local", "the cluster domain")
	upstream := fs.String("upstream", "", "forward names outside the zone to these resolvers, `ADDR[,ADDR]` (IP or IP:port), tried in order (default: the nameservers of --resolv-conf)")
	fs.StringVar(&c.ResolvConf, "resolv-conf", "/etc/resolv.conf", "where the default upstreams come from")
	ttl := fs.Uint("ttl", 5, "TTL of the cluster's records and negative answers, in seconds")
	fs.DurationVar(&c.UpstreamTimeout, "upstream-timeout", dnsresolve.DefaultUpstreamTimeout, "how long one upstream may take to answer")
	fs.IntVar(&c.MaxConcurrent, "max-concurrent", dnsresolve.DefaultMaxConcurrent, "queries that may wait for upstreams at once; more are answered REFUSED (CoreDNS forward's max_concurrent)")
	fs.IntVar(&c.CacheSize, "cache-size", dnsresolve.DefaultCacheSize, "forwarded answers to cache (0: no cache)")
	fs.BoolVar(&c.LogQueries, "log-queries", false, "log one line per query: client, name, type, rcode, duration")
	fs.StringVar(&c.MetricsAddr, "metrics-bind-address", "127.0.0.1:9153", "serve /metrics and /healthz here (CoreDNS's port); empty: don't")
	fs.BoolVar(&c.Profiling, "profiling", false, "serve Go's /debug/pprof/ on --metrics-bind-address")
	fs.StringVar(&c.LogLevel, "v", "info", "log level: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	var errs []error
	if c.Conf != "" {
		fs.Visit(func(f *flag.Flag) {
			if plugin, covered := corefileCovers[f.Name]; covered {
				errs = append(errs, fmt.Errorf("--%s and -conf: the Corefile says this (%s); set it there", f.Name, plugin))
			}
		})
	}
	if c.ServicesFile != "" && c.Kubeconfig != "" {
		errs = append(errs, errors.New("--services and --kubeconfig: choose one"))
	}
	if *ttl > 1<<31-1 {
		errs = append(errs, fmt.Errorf("--ttl %d: more than 2^31-1 (RFC 2181 8)", *ttl))
	}
	c.TTL = uint32(*ttl)
	if _, ok := dns.IsDomainName(c.Zone); !ok || strings.Trim(c.Zone, ".") == "" {
		errs = append(errs, fmt.Errorf("--zone %q: not a domain name", c.Zone))
	}
	for u := range strings.SplitSeq(*upstream, ",") {
		if u = strings.TrimSpace(u); u != "" {
			c.Upstreams = append(c.Upstreams, u)
		}
	}
	for a := range strings.SplitSeq(*advertise, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		ip, err := netip.ParseAddr(a)
		if err != nil || ip.Zone() != "" {
			errs = append(errs, fmt.Errorf("--advertise-address %q: not an IP address", a))
			continue
		}
		c.Advertise = append(c.Advertise, ip)
	}
	switch c.Pods = dnsresolve.PodMode(*pods); c.Pods {
	case dnsresolve.PodsInsecure, dnsresolve.PodsVerified, dnsresolve.PodsDisabled:
	default:
		errs = append(errs, fmt.Errorf("--pods %q: want insecure, verified or disabled", *pods))
	}
	if c.MaxConcurrent < 1 {
		errs = append(errs, fmt.Errorf("--max-concurrent %d: must be at least 1", c.MaxConcurrent))
	}
	if c.ServicesMaxBytes < 1 {
		errs = append(errs, fmt.Errorf("--services-max-bytes %d: must be at least 1", c.ServicesMaxBytes))
	}
	if c.CacheSize == 0 {
		c.CacheSize = -1 // dnsresolve.Config: negative disables
	}
	return c, errors.Join(errs...)
}

// corefileCovers are the flags a Corefile replaces, and what in it does.
var corefileCovers = map[string]string{
	"listen":               "the server block's port and the bind plugin",
	"zone":                 "the kubernetes plugin's zones",
	"pods":                 "the kubernetes plugin's pods option",
	"ttl":                  "the kubernetes plugin's ttl option",
	"upstream":             "the forward plugin",
	"resolv-conf":          "the forward plugin: forward . /etc/resolv.conf",
	"upstream-timeout":     "the forward plugin's read_timeout",
	"max-concurrent":       "the forward plugin's max_concurrent",
	"cache-size":           "the cache plugin",
	"log-queries":          "the log plugin",
	"metrics-bind-address": "the prometheus plugin",
	"profiling":            "the pprof plugin",
}

// nsAddrs are the addresses of ns.dns.<zone>: --advertise-address, else the
// address clusterdns listens on, else (listening on every address) those of
// the host's interfaces, as CoreDNS answers with its own addresses when no
// Service endpoint matches them. Loopback counts only when nothing else is up.
func nsAddrs(advertise []netip.Addr, listen net.Addr) []netip.Addr {
	if len(advertise) > 0 {
		return advertise
	}
	if ap, err := netip.ParseAddrPort(listen.String()); err == nil && !ap.Addr().IsUnspecified() {
		return []netip.Addr{ap.Addr().Unmap()}
	}
	ifAddrs, _ := net.InterfaceAddrs()
	var global, loopback []netip.Addr
	for _, a := range ifAddrs {
		p, err := netip.ParsePrefix(a.String())
		if err != nil {
			continue
		}
		switch ip := p.Addr().Unmap(); {
		case ip.IsLoopback():
			loopback = append(loopback, ip)
		case !ip.IsLinkLocalUnicast():
			global = append(global, ip)
		}
	}
	if len(global) > 0 {
		return global
	}
	return loopback
}

// resolvConfUpstreams returns the nameservers of a resolv.conf as IP:port.
func resolvConfUpstreams(path string) ([]string, error) {
	cc, err := dns.ClientConfigFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("read upstreams: %w", err)
	}
	var out []string
	for _, s := range cc.Servers {
		out = append(out, net.JoinHostPort(s, cc.Port))
	}
	return out, nil
}
