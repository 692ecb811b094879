package corefile

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coredns/caddy/caddyfile"
	"github.com/miekg/dns"
)

// coreDNSPlugins are CoreDNS v1.14.6's plugins in the order a query passes
// them (core/dnsserver/zdirectives.go): a Corefile's plugins run in this
// order whatever order they are written in.
var coreDNSPlugins = []string{
	"root", "metadata", "geoip", "cancel", "tls", "proxyproto", "quic", "grpc_server", "https", "https3",
	"timeouts", "multisocket", "reload", "nsid", "bufsize", "bind", "debug", "trace", "ready", "health",
	"pprof", "prometheus", "errors", "log", "dnstap", "local", "dns64", "any", "chaos", "loadbalance",
	"tsig", "cache", "rewrite", "acl", "header", "dnssec", "autopath", "minimal", "template", "transfer",
	"hosts", "route53", "azure", "clouddns", "k8s_external", "kubernetes", "file", "auto", "secondary",
	"etcd", "loop", "forward", "grpc", "erratic", "whoami", "on", "sign", "view", "nomad",
}

// pluginOrder is name's place in coreDNSPlugins, len(coreDNSPlugins) for a
// name that is none of them.
func pluginOrder(name string) int {
	if i := slices.Index(coreDNSPlugins, name); i >= 0 {
		return i
	}
	return len(coreDNSPlugins)
}

// plugins are the plugins clusterdns implements, each with its setup: it
// reads the plugin's tokens as CoreDNS's setup function for it does.
var plugins = map[string]func(*parser, *caddyfile.Dispenser){
	"errors":      (*parser).errorsPlugin,
	"log":         (*parser).logPlugin,
	"health":      (*parser).health,
	"ready":       (*parser).ready,
	"prometheus":  (*parser).prometheus,
	"pprof":       (*parser).pprof,
	"kubernetes":  (*parser).kubernetes,
	"forward":     (*parser).forward,
	"cache":       (*parser).cache,
	"loop":        (*parser).loop,
	"reload":      (*parser).reload,
	"loadbalance": (*parser).loadbalance,
	"bind":        (*parser).bind,
}

// once checks that the plugin appears once in the block (CoreDNS's
// plugin.ErrOnce) and reports whether this is its first occurrence.
func (p *parser) once(d *caddyfile.Dispenser, seen *bool) bool {
	if *seen {
		p.fail(d.Line(), d.Val(), "", "may appear only once in a server block; remove this line")
		return false
	}
	*seen = true
	return true
}

// noArgs reports an error for arguments where a plugin takes none.
func (p *parser) noArgs(d *caddyfile.Dispenser, plugin string) bool {
	if args := d.RemainingArgs(); len(args) > 0 {
		p.fail(d.Line(), plugin, "", "takes no arguments; remove %q", strings.Join(args, " "))
		return false
	}
	return true
}

// unknownOption is the error for an option in a plugin's block that
// clusterdns does not implement.
func (p *parser) unknownOption(d *caddyfile.Dispenser, plugin string, known bool) {
	opt := d.Val()
	line := d.Line()
	args := d.RemainingArgs()
	text := strings.TrimSpace(opt + " " + strings.Join(args, " "))
	if known {
		p.fail(line, plugin, opt, "clusterdns does not implement it; remove the line %q from the %s block", text, plugin)
		return
	}
	p.fail(line, plugin, opt, "no such option of CoreDNS's %s plugin; remove the line %q", plugin, text)
}

func (p *parser) errorsPlugin(d *caddyfile.Dispenser) {
	var seen bool
	for d.Next() {
		if !p.once(d, &seen) || !p.noArgs(d, "errors") {
			continue
		}
		for d.NextBlock() {
			p.unknownOption(d, "errors", d.Val() == "consolidate" || d.Val() == "stacktrace")
		}
		p.cfg.Errors = &Errors{}
	}
}

func (p *parser) logPlugin(d *caddyfile.Dispenser) {
	var seen bool
	for d.Next() {
		if !p.once(d, &seen) {
			continue
		}
		line := d.Line()
		if args := d.RemainingArgs(); len(args) > 0 {
			p.fail(line, "log", "", "names and formats (%q): clusterdns logs every query in one format; write \"log\" alone", strings.Join(args, " "))
		}
		for d.NextBlock() {
			p.unknownOption(d, "log", d.Val() == "class")
		}
		p.cfg.Log = true
	}
}

// httpAddr reads a plugin's optional listen address, def when absent.
func (p *parser) httpAddr(d *caddyfile.Dispenser, plugin, def string) (string, bool) {
	args := d.RemainingArgs()
	switch len(args) {
	case 0:
		return def, true
	case 1:
		if _, _, err := net.SplitHostPort(args[0]); err != nil {
			p.fail(d.Line(), plugin, "", "address %q: %v", args[0], err)
			return "", false
		}
		return args[0], true
	}
	p.fail(d.Line(), plugin, "", "takes one address at most, not %q", strings.Join(args, " "))
	return "", false
}

func (p *parser) health(d *caddyfile.Dispenser) {
	var seen bool
	for d.Next() {
		if !p.once(d, &seen) {
			continue
		}
		addr, ok := p.httpAddr(d, "health", ":8080")
		h := &Health{Addr: addr}
		for d.NextBlock() {
			if d.Val() != "lameduck" {
				p.unknownOption(d, "health", false)
				continue
			}
			args := d.RemainingArgs()
			if len(args) != 1 {
				p.fail(d.Line(), "health", "lameduck", "takes one duration, as \"lameduck 5s\"")
				ok = false
				continue
			}
			dur, err := time.ParseDuration(args[0])
			if err != nil || dur < 0 {
				p.fail(d.Line(), "health", "lameduck", "%q: not a duration", args[0])
				ok = false
				continue
			}
			h.Lameduck = dur
		}
		if ok {
			p.cfg.Health = h
		}
	}
}

func (p *parser) ready(d *caddyfile.Dispenser) {
	var seen bool
	for d.Next() {
		if !p.once(d, &seen) {
			continue
		}
		addr, ok := p.httpAddr(d, "ready", ":8181")
		r := &Ready{Addr: addr, Monitor: "until-ready"}
		for d.NextBlock() {
			if d.Val() != "monitor" {
				p.unknownOption(d, "ready", false)
				ok = false
				continue
			}
			switch args := d.RemainingArgs(); {
			case len(args) == 1 && (args[0] == "until-ready" || args[0] == "continuously"):
				r.Monitor = args[0]
			default:
				p.fail(d.Line(), "ready", "monitor", "takes until-ready or continuously, not %q", strings.Join(args, " "))
				ok = false
			}
		}
		if ok {
			p.cfg.Ready = r
		}
	}
}

func (p *parser) prometheus(d *caddyfile.Dispenser) {
	var seen bool
	for d.Next() {
		if !p.once(d, &seen) {
			continue
		}
		// CoreDNS's default is localhost:9153; kubeadm's Corefile says :9153.
		addr, ok := p.httpAddr(d, "prometheus", "localhost:9153")
		for d.NextBlock() {
			if d.Val() == "runtime_metrics" && len(d.RemainingArgs()) == 0 {
				p.ignore(d.Line(), "prometheus", "runtime_metrics",
					"Go's runtime metrics are the client_golang Go collector's default set; the full runtime/metrics set is not exported")
				continue
			}
			p.unknownOption(d, "prometheus", d.Val() == "tls" || d.Val() == "runtime_metrics")
			ok = false
		}
		if ok {
			p.cfg.Prometheus = &Prometheus{Addr: addr}
		}
	}
}

func (p *parser) pprof(d *caddyfile.Dispenser) {
	var seen bool
	for d.Next() {
		if !p.once(d, &seen) {
			continue
		}
		addr, ok := p.httpAddr(d, "pprof", "localhost:6053")
		for d.NextBlock() {
			p.unknownOption(d, "pprof", d.Val() == "block")
			ok = false
		}
		if ok {
			p.cfg.Pprof = &Pprof{Addr: addr}
		}
	}
}

func (p *parser) loop(d *caddyfile.Dispenser) {
	var seen bool
	for d.Next() {
		if p.once(d, &seen) && p.noArgs(d, "loop") {
			p.cfg.Loop = true
		}
		for d.NextBlock() {
			p.unknownOption(d, "loop", false)
		}
	}
}

func (p *parser) loadbalance(d *caddyfile.Dispenser) {
	var seen bool
	for d.Next() {
		if !p.once(d, &seen) {
			continue
		}
		line := d.Line()
		args := d.RemainingArgs()
		switch {
		case len(args) == 0, len(args) == 1 && args[0] == "round_robin":
			p.cfg.LoadBalance = true
		case args[0] == "weighted":
			p.fail(line, "loadbalance", "weighted", "clusterdns does not implement it; write \"loadbalance\" (round_robin)")
		default:
			p.fail(line, "loadbalance", args[0], "unknown policy; write \"loadbalance\" (round_robin)")
		}
		for d.NextBlock() {
			p.unknownOption(d, "loadbalance", d.Val() == "prefer")
		}
	}
}

func (p *parser) reload(d *caddyfile.Dispenser) {
	var seen bool
	for d.Next() {
		if !p.once(d, &seen) {
			continue
		}
		line := d.Line()
		// CoreDNS's reload/setup.go: interval 30s (at least 2s), jitter 15s
		// (0 or at least 1s, at most half the interval).
		r := &Reload{Interval: 30 * time.Second, Jitter: 15 * time.Second}
		args := d.RemainingArgs()
		ok := len(args) <= 2
		if !ok {
			p.fail(line, "reload", "", "takes an interval and a jitter at most, not %q", strings.Join(args, " "))
		}
		if ok && len(args) > 0 {
			r.Interval, ok = p.duration(line, "reload", "interval", args[0])
			if ok && r.Interval < 2*time.Second {
				p.fail(line, "reload", "interval", "%v: must be at least 2s", r.Interval)
				ok = false
			}
		}
		if ok && len(args) > 1 {
			r.Jitter, ok = p.duration(line, "reload", "jitter", args[1])
			if ok && r.Jitter != 0 && r.Jitter < time.Second {
				p.fail(line, "reload", "jitter", "%v: must be 0 or at least 1s", r.Jitter)
				ok = false
			}
		}
		r.Jitter = min(r.Jitter, r.Interval/2)
		for d.NextBlock() {
			p.unknownOption(d, "reload", false)
			ok = false
		}
		if ok {
			p.cfg.Reload = r
		}
	}
}

func (p *parser) duration(line int, plugin, option, s string) (time.Duration, bool) {
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		p.fail(line, plugin, option, "%q: not a duration", s)
		return 0, false
	}
	return v, true
}

// bind: the address DNS is served on; clusterdns serves one.
func (p *parser) bind(d *caddyfile.Dispenser) {
	var seen bool
	for d.Next() {
		if !p.once(d, &seen) {
			continue
		}
		line := d.Line()
		args := d.RemainingArgs()
		for d.NextBlock() {
			p.unknownOption(d, "bind", d.Val() == "except")
		}
		if len(args) != 1 {
			p.fail(line, "bind", "", "clusterdns listens on one address; write \"bind ADDRESS\" with one IP address")
			continue
		}
		ip, err := netip.ParseAddr(args[0])
		if err != nil || ip.Zone() != "" {
			p.fail(line, "bind", "", "%q: not an IP address (interface names are not implemented); write an IP address", args[0])
			continue
		}
		if p.cfg.Listen == "" {
			continue // the server block's key was refused
		}
		_, port, _ := net.SplitHostPort(p.cfg.Listen)
		p.cfg.Listen = net.JoinHostPort(ip.String(), port)
		p.cfg.Server = "dns://" + p.cfg.Listen
	}
}

// kubernetes reads the kubernetes plugin as CoreDNS's ParseStanza does.
func (p *parser) kubernetes(d *caddyfile.Dispenser) {
	var seen bool
	for d.Next() {
		if !p.once(d, &seen) {
			continue
		}
		line := d.Line()
		k := &Kubernetes{Pods: PodsDisabled, TTL: 5}
		ok := true
		args := d.RemainingArgs()
		if len(args) == 0 {
			args = p.cfg.Zones
		}
		for _, a := range args {
			z, valid := zoneName(a)
			if !valid {
				p.fail(line, "kubernetes", "", "zone %q: not a domain name (CIDR zones are not implemented); write it as a zone, as \"in-addr.arpa\"", a)
				ok = false
				continue
			}
			k.Zones = append(k.Zones, z)
		}
		for _, z := range k.Zones {
			if cd := k.ClusterDomain(); ok && z != cd && !isReverse(z) {
				p.fail(line, "kubernetes", "", "zone %s beside %s: clusterdns serves one cluster domain and reverse zones; remove %s", z, cd, strings.TrimSuffix(z, "."))
				ok = false
			}
		}
		if ok && k.ClusterDomain() == "" {
			p.fail(line, "kubernetes", "", "zones %q: a zone that is not a reverse zone must come first (CoreDNS: \"non-reverse zone name must be used\")", args)
			ok = false
		}
		for d.NextBlock() {
			if !p.kubernetesOption(d, k) {
				ok = false
			}
		}
		if ok {
			p.cfg.Kubernetes = k
		}
	}
}

// kubernetesOptionsRefused are the kubernetes plugin's options clusterdns
// does not implement.
var kubernetesOptionsRefused = []string{
	"endpoint_pod_names", "endpoint", "tls", "labels", "namespace_labels", "noendpoints", "ignore", "multicluster",
}

func (p *parser) kubernetesOption(d *caddyfile.Dispenser, k *Kubernetes) bool {
	opt, line := d.Val(), d.Line()
	switch opt {
	case "pods":
		args := d.RemainingArgs()
		if len(args) != 1 {
			p.fail(line, "kubernetes", "pods", "takes one of disabled, insecure, verified")
			return false
		}
		switch m := PodMode(args[0]); m {
		case PodsDisabled, PodsInsecure, PodsVerified:
			k.Pods = m
		default:
			p.fail(line, "kubernetes", "pods", "%q: must be one of disabled, verified, insecure", args[0])
			return false
		}
	case "fallthrough":
		args := d.RemainingArgs()
		if len(args) == 0 {
			k.Fallthrough = []string{"."}
			return true
		}
		for _, a := range args {
			z, valid := zoneName(a)
			if !valid {
				p.fail(line, "kubernetes", "fallthrough", "zone %q: not a domain name", a)
				return false
			}
			k.Fallthrough = append(k.Fallthrough, z)
		}
	case "ttl":
		args := d.RemainingArgs()
		if len(args) != 1 {
			p.fail(line, "kubernetes", "ttl", "takes one number of seconds")
			return false
		}
		t, err := strconv.Atoi(args[0])
		if err != nil || t < 0 || t > 3600 {
			p.fail(line, "kubernetes", "ttl", "%q: must be in range [0, 3600]", args[0])
			return false
		}
		k.TTL = uint32(t)
	case "namespaces":
		args := d.RemainingArgs()
		if len(args) == 0 {
			p.fail(line, "kubernetes", "namespaces", "names no namespace")
			return false
		}
		k.Namespaces = append(k.Namespaces, args...)
	case "kubeconfig":
		args := d.RemainingArgs()
		switch len(args) {
		case 1:
			k.Kubeconfig = args[0]
		case 2:
			p.fail(line, "kubernetes", "kubeconfig", "a context (%q) is not implemented; make it the file's current-context and write \"kubeconfig %s\"", args[1], args[0])
			return false
		default:
			p.fail(line, "kubernetes", "kubeconfig", "takes a file (and a context)")
			return false
		}
	case "startup_timeout":
		args := d.RemainingArgs()
		if len(args) != 1 {
			p.fail(line, "kubernetes", opt, "takes one duration")
			return false
		}
		if _, ok := p.duration(line, "kubernetes", opt, args[0]); !ok {
			return false
		}
		p.ignore(line, "kubernetes", opt, "clusterdns serves at once and answers SERVFAIL in its zones until the first sync, then /ready turns 200; it does not hold the server back")
	case "apiserver_qps", "apiserver_burst", "apiserver_max_inflight":
		args := d.RemainingArgs()
		if len(args) != 1 {
			p.fail(line, "kubernetes", opt, "takes one number")
			return false
		}
		if v, err := strconv.ParseFloat(args[0], 64); err != nil || v < 0 {
			p.fail(line, "kubernetes", opt, "%q: must be a number >= 0", args[0])
			return false
		}
		p.ignore(line, "kubernetes", opt, "clusterdns's API client makes only its list and watch calls, with client-go's default limits")
	default:
		p.unknownOption(d, "kubernetes", slices.Contains(kubernetesOptionsRefused, opt))
		return false
	}
	return true
}

// forward reads the forward plugin as CoreDNS's parseStanza does.
func (p *parser) forward(d *caddyfile.Dispenser) {
	var seen bool
	for d.Next() {
		if !p.once(d, &seen) {
			continue
		}
		line := d.Line()
		// CoreDNS's forward.New: max_fails 2, health_check 0.5s, policy random.
		f := &Forward{MaxFails: 2, HealthCheck: 500 * time.Millisecond, Policy: "random"}
		ok := true
		args := d.RemainingArgs()
		if len(args) < 2 {
			p.fail(line, "forward", "", "takes a zone and at least one upstream, as \"forward . /etc/resolv.conf\"")
			ok = false
		} else {
			from, valid := zoneName(args[0])
			if !valid {
				p.fail(line, "forward", "", "zone %q: not a domain name", args[0])
				ok = false
			}
			f.From = from
			for _, to := range args[1:] {
				addrs, err := upstreams(to)
				if err != nil {
					p.fail(line, "forward", "", "upstream %q: %v", to, err)
					ok = false
				}
				f.To = append(f.To, addrs...)
			}
		}
		for d.NextBlock() {
			if !p.forwardOption(d, f) {
				ok = false
			}
		}
		if ok && len(f.To) == 0 {
			p.fail(line, "forward", "", "no upstream: %q lists no nameserver", strings.Join(args[1:], " "))
			ok = false
		}
		if ok {
			p.cfg.Forward = f
		}
	}
}

// upstreams reads one TO of forward: an address, or a resolv.conf-style file
// whose nameservers are the upstreams (read now: on reload, again).
func upstreams(to string) ([]string, error) {
	for _, scheme := range []string{"tls://", "https://", "grpc://", "quic://", "h3://"} {
		if strings.HasPrefix(to, scheme) {
			return nil, fmt.Errorf("%s upstreams are not implemented; use plain DNS (an IP address)", strings.TrimSuffix(scheme, "://"))
		}
	}
	if a, ok := hostPort(to); ok {
		return []string{a}, nil
	}
	if strings.HasPrefix(to, "dns://") || !strings.Contains(to, "/") {
		return nil, fmt.Errorf("not an IP address or IP:port (host names are not implemented)")
	}
	cc, err := dns.ClientConfigFromFile(to)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range cc.Servers {
		out = append(out, net.JoinHostPort(s, cc.Port))
	}
	return out, nil
}

// forwardOptionsRefused are forward's options clusterdns does not implement.
var forwardOptionsRefused = []string{
	"tls", "tls_servername", "next", "next_on_nodata", "doh_method", "resolver", "source_address",
	"max_connect_attempts", "failfast_all_unhealthy_upstreams",
}

func (p *parser) forwardOption(d *caddyfile.Dispenser, f *Forward) bool {
	opt, line := d.Val(), d.Line()
	args := d.RemainingArgs()
	one := func() bool {
		if len(args) != 1 {
			p.fail(line, "forward", opt, "takes one value")
			return false
		}
		return true
	}
	number := func() (int, bool) {
		if !one() {
			return 0, false
		}
		n, err := strconv.Atoi(args[0])
		if err != nil || n < 0 {
			p.fail(line, "forward", opt, "%q: not a number >= 0", args[0])
			return 0, false
		}
		return n, true
	}
	switch opt {
	case "max_concurrent":
		n, ok := number()
		f.MaxConcurrent = n
		return ok
	case "max_fails":
		n, ok := number()
		f.MaxFails = n
		return ok
	case "except":
		if len(args) == 0 {
			p.fail(line, "forward", opt, "names no zone")
			return false
		}
		for _, a := range args {
			z, valid := zoneName(a)
			if !valid {
				p.fail(line, "forward", opt, "zone %q: not a domain name", a)
				return false
			}
			f.Except = append(f.Except, z)
		}
	case "health_check":
		if len(args) == 0 {
			p.fail(line, "forward", opt, "takes a duration")
			return false
		}
		v, ok := p.duration(line, "forward", opt, args[0])
		if !ok {
			return false
		}
		f.HealthCheck = v
		for i := 1; i < len(args); i++ {
			switch args[i] {
			case "no_rec":
				f.HealthCheckNoRec = true
			case "domain":
				if i+1 == len(args) {
					p.fail(line, "forward", opt, "domain names no domain")
					return false
				}
				i++
				z, valid := zoneName(args[i])
				if !valid {
					p.fail(line, "forward", opt, "domain %q: not a domain name", args[i])
					return false
				}
				f.HealthCheckDomain = z
			default:
				p.fail(line, "forward", opt, "%q: want no_rec or domain NAME", args[i])
				return false
			}
		}
	case "policy":
		if !one() {
			return false
		}
		switch args[0] {
		case "random", "round_robin", "sequential":
			f.Policy = args[0]
		default:
			p.fail(line, "forward", opt, "%q: must be random, round_robin or sequential", args[0])
			return false
		}
	case "force_tcp", "prefer_udp":
		if len(args) != 0 {
			p.fail(line, "forward", opt, "takes no value")
			return false
		}
		f.ForceTCP = f.ForceTCP || opt == "force_tcp"
		f.PreferUDP = f.PreferUDP || opt == "prefer_udp"
	case "failover":
		if len(args) == 0 {
			p.fail(line, "forward", opt, "names no response code")
			return false
		}
		for _, a := range args {
			rc, ok := dns.StringToRcode[strings.ToUpper(a)]
			if !ok {
				p.fail(line, "forward", opt, "%q: not a response code (as SERVFAIL)", a)
				return false
			}
			f.Failover = append(f.Failover, rc)
		}
	case "read_timeout":
		if !one() {
			return false
		}
		v, ok := p.duration(line, "forward", opt, args[0])
		f.ReadTimeout = v
		return ok
	case "expire", "max_age", "max_idle_conns":
		if !one() {
			return false
		}
		p.ignore(line, "forward", opt, "clusterdns keeps no connections to upstreams: each exchange has a socket of its own")
	default:
		// Put the arguments back in the message: unknownOption reads them.
		text := strings.TrimSpace(opt + " " + strings.Join(args, " "))
		if slices.Contains(forwardOptionsRefused, opt) {
			p.fail(line, "forward", opt, "clusterdns does not implement it; remove the line %q from the forward block", text)
		} else {
			p.fail(line, "forward", opt, "no such option of CoreDNS's forward plugin; remove the line %q", text)
		}
		return false
	}
	return true
}

// cache reads the cache plugin as CoreDNS's cacheParse does.
func (p *parser) cache(d *caddyfile.Dispenser) {
	var seen bool
	for d.Next() {
		if !p.once(d, &seen) {
			continue
		}
		line := d.Line()
		// CoreDNS's cache.New: capacity 10000 each, success TTL at most
		// 3600s, denial 1800s, at least 5s each, SERVFAIL 5s.
		c := &Cache{SuccessCap: 10000, SuccessTTL: time.Hour, SuccessMinTTL: 5 * time.Second,
			DenialCap: 10000, DenialTTL: 30 * time.Minute, DenialMinTTL: 5 * time.Second, ServfailTTL: 5 * time.Second}
		ok := true
		args := d.RemainingArgs()
		if len(args) > 0 {
			if ttl, err := strconv.Atoi(args[0]); err == nil {
				if ttl <= 0 {
					p.fail(line, "cache", "", "TTL %d: can not be zero or negative", ttl)
					ok = false
				}
				c.SuccessTTL = time.Duration(ttl) * time.Second
				c.DenialTTL = c.SuccessTTL
				args = args[1:]
			}
		}
		for _, a := range args {
			z, valid := zoneName(a)
			if !valid {
				p.fail(line, "cache", "", "zone %q: not a domain name", a)
				ok = false
			}
			c.Zones = append(c.Zones, z)
		}
		if len(c.Zones) == 0 {
			c.Zones = p.cfg.Zones
		}
		for d.NextBlock() {
			if !p.cacheOption(d, c) {
				ok = false
			}
		}
		if ok {
			p.cfg.Cache = c
		}
	}
}

func (p *parser) cacheOption(d *caddyfile.Dispenser, c *Cache) bool {
	opt, line := d.Val(), d.Line()
	args := d.RemainingArgs()
	switch opt {
	case "success", "denial":
		if len(args) == 0 || len(args) > 3 {
			p.fail(line, "cache", opt, "takes CAPACITY [TTL [MINTTL]]")
			return false
		}
		var v [3]int
		for i, a := range args {
			n, err := strconv.Atoi(a)
			if err != nil || n < 0 || (i == 1 && n == 0) {
				p.fail(line, "cache", opt, "%q: not a number (a TTL above 0)", a)
				return false
			}
			v[i] = n
		}
		capacity, ttl, minTTL := &c.SuccessCap, &c.SuccessTTL, &c.SuccessMinTTL
		if opt == "denial" {
			capacity, ttl, minTTL = &c.DenialCap, &c.DenialTTL, &c.DenialMinTTL
		}
		*capacity = v[0]
		if len(args) > 1 {
			*ttl = time.Duration(v[1]) * time.Second
		}
		if len(args) > 2 {
			*minTTL = time.Duration(v[2]) * time.Second
		}
	case "disable":
		if len(args) == 0 {
			p.fail(line, "cache", opt, "takes success or denial, and zones")
			return false
		}
		zones := []string{"."}
		if len(args) > 1 {
			zones = nil
			for _, a := range args[1:] {
				z, valid := zoneName(a)
				if !valid {
					p.fail(line, "cache", opt, "invalid disabled zone: %s", a)
					return false
				}
				zones = append(zones, z)
			}
		}
		switch args[0] {
		case "success":
			c.DisableSuccess = zones
		case "denial":
			c.DisableDenial = zones
		default:
			p.fail(line, "cache", opt, "cache type for disable must be \"success\" or \"denial\", not %q", args[0])
			return false
		}
	case "servfail":
		if len(args) != 1 {
			p.fail(line, "cache", opt, "takes one duration")
			return false
		}
		v, ok := p.duration(line, "cache", opt, args[0])
		if ok && v > 5*time.Minute {
			p.fail(line, "cache", opt, "caching SERVFAIL responses over 5 minutes is not permitted")
			return false
		}
		c.ServfailTTL = v
		return ok
	case "keepttl":
		if len(args) != 0 {
			p.fail(line, "cache", opt, "takes no value")
			return false
		}
		c.KeepTTL = true
	case "prefetch", "serve_stale":
		p.fail(line, "cache", opt, "clusterdns does not implement it; remove the line %q from the cache block", strings.TrimSpace(opt+" "+strings.Join(args, " ")))
		return false
	default:
		p.fail(line, "cache", opt, "no such option of CoreDNS's cache plugin; remove the line %q", strings.TrimSpace(opt+" "+strings.Join(args, " ")))
		return false
	}
	return true
}
