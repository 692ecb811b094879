package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/svcproxy/svcproxy/dnsresolve"
)

// Config is everything the flags say; run takes it and nothing else.
type Config struct {
	ServicesFile    string
	Kubeconfig      string
	Listen          string
	Zone            string
	Upstreams       []string // empty: from ResolvConf
	ResolvConf      string
	TTL             uint32
	UpstreamTimeout time.Duration
	CacheSize       int
	MetricsAddr     string
	LogLevel        string
}

// parseFlags reads args into a Config, checking what can be checked before
// anything runs.
func parseFlags(args []string) (*Config, error) {
	c := &Config{}
	fs := flag.NewFlagSet("clusterdns", flag.ContinueOnError)
	fs.StringVar(&c.ServicesFile, "services", "", "Kubernetes manifests `FILE` (Services, EndpointSlices, Endpoints), reloaded when it changes")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "watch the API server of this kubeconfig `FILE`; without --services or --kubeconfig, the in-cluster config")
	fs.StringVar(&c.Listen, "listen", ":53", "answer on this UDP and TCP `ADDR`ess")
	fs.StringVar(&c.Zone, "zone", "cluster.local", "the cluster domain")
	upstream := fs.String("upstream", "", "forward names outside the zone to these resolvers, `ADDR[,ADDR]` (IP or IP:port), tried in order (default: the nameservers of --resolv-conf)")
	fs.StringVar(&c.ResolvConf, "resolv-conf", "/etc/resolv.conf", "where the default upstreams come from")
	ttl := fs.Uint("ttl", 5, "TTL of the cluster's records and negative answers, in seconds")
	fs.DurationVar(&c.UpstreamTimeout, "upstream-timeout", dnsresolve.DefaultUpstreamTimeout, "how long one upstream may take to answer")
	fs.IntVar(&c.CacheSize, "cache-size", dnsresolve.DefaultCacheSize, "forwarded answers to cache (0: no cache)")
	fs.StringVar(&c.MetricsAddr, "metrics-bind-address", "127.0.0.1:9153", "serve /metrics and /healthz here (CoreDNS's port); empty: don't")
	fs.StringVar(&c.LogLevel, "v", "info", "log level: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	var errs []error
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
	if c.CacheSize == 0 {
		c.CacheSize = -1 // dnsresolve.Config: negative disables
	}
	return c, errors.Join(errs...)
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
