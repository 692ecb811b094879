package corefile

import (
	"bytes"
	"crypto/sha512"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/coredns/caddy/caddyfile"
	"github.com/miekg/dns"
)

// Config is what a Corefile asks of clusterdns: one server block, each of its
// plugins that clusterdns implements, and their options. A nil plugin field
// means the plugin is absent.
type Config struct {
	// File is the Corefile's name, as errors and logs give it.
	File string
	// Listen is the address DNS is served on: the server block's port, on
	// bind's address or every address ("host:port").
	Listen string
	// Server is the server's name in CoreDNS's metrics (the label server):
	// "dns://:53", or "dns://127.0.0.1:53" with bind.
	Server string
	// Zones are the server block's zones ("." for kubeadm's).
	Zones []string

	Errors      *Errors
	Log         bool
	Health      *Health
	Ready       *Ready
	Prometheus  *Prometheus
	Kubernetes  *Kubernetes
	Forward     *Forward
	Cache       *Cache
	Loop        bool
	Reload      *Reload
	LoadBalance bool
	Pprof       *Pprof

	// Ignored are the options clusterdns accepts and does not act on: the
	// caller logs each (Notice.String says where and why).
	Ignored []Notice
}

// Errors is the errors plugin: every query that ends in an error is logged.
type Errors struct{}

// Health is the health plugin: GET /health on Addr answers 200 OK while the
// process runs; on shutdown the process keeps serving for Lameduck first.
type Health struct {
	Addr     string
	Lameduck time.Duration
}

// Ready is the ready plugin: GET /ready on Addr answers 200 once every plugin
// that has a readiness is ready (kubernetes: the first Snapshot indexed).
// Monitor is its monitor option, "until-ready" (CoreDNS's default: once
// ready, the plugins are not asked again) or "continuously".
type Ready struct{ Addr, Monitor string }

// Prometheus is the prometheus plugin: /metrics on Addr.
type Prometheus struct{ Addr string }

// Pprof is the pprof plugin: Go's /debug/pprof/ on Addr.
type Pprof struct{ Addr string }

// Reload is the reload plugin: the Corefile is read again every Interval
// (plus or minus half of Jitter, drawn once, as CoreDNS does).
type Reload struct {
	Interval time.Duration
	Jitter   time.Duration
}

// PodMode is the kubernetes plugin's pods option.
type PodMode string

// The pods option's values, CoreDNS's words.
const (
	PodsDisabled PodMode = "disabled"
	PodsInsecure PodMode = "insecure"
	PodsVerified PodMode = "verified"
)

// Kubernetes is the kubernetes plugin.
type Kubernetes struct {
	// Zones are the zones it is authoritative for, lower-case FQDNs; the
	// first that is not a reverse zone is the cluster domain.
	Zones []string
	// Pods: how <a-b-c-d>.<namespace>.pod.<zone> is answered; CoreDNS's
	// default is disabled.
	Pods PodMode
	// Fallthrough are the zones (lower-case FQDNs) whose names the plugin
	// does not have go on to the next plugin (forward) instead of NXDOMAIN;
	// nil: none, ["."]: every zone.
	Fallthrough []string
	// TTL of its records, 0 to 3600 (CoreDNS's default 5).
	TTL uint32
	// Kubeconfig is the kubeconfig option's file; "": in-cluster.
	Kubeconfig string
	// Namespaces, when not empty, are the only namespaces it answers for.
	Namespaces []string
}

// ClusterDomain is the first of Zones that is not a reverse zone.
func (k *Kubernetes) ClusterDomain() string {
	for _, z := range k.Zones {
		if !isReverse(z) {
			return z
		}
	}
	return ""
}

// Forward is the forward plugin.
type Forward struct {
	// From is the zone whose names are forwarded ("." for every name).
	From string
	// To are the upstreams, "IP:port", a resolv.conf's nameservers in its
	// place.
	To []string
	// Except are zones not forwarded.
	Except []string
	// MaxConcurrent bounds the queries waiting for upstreams (0: none).
	MaxConcurrent int
	// MaxFails: failed exchanges in a row that mark an upstream down (0:
	// never marked down).
	MaxFails int
	// HealthCheck is how often a down upstream is probed.
	HealthCheck time.Duration
	// HealthCheckNoRec sends the probe without RD; HealthCheckDomain is
	// the name it asks (". NS" by default).
	HealthCheckNoRec  bool
	HealthCheckDomain string
	// Policy: "random" (CoreDNS's default), "round_robin" or "sequential".
	Policy string
	// ForceTCP and PreferUDP choose the transport to upstreams.
	ForceTCP, PreferUDP bool
	// Failover are the response codes that move on to the next upstream.
	Failover []int
	// ReadTimeout bounds one exchange with one upstream (0: the default).
	ReadTimeout time.Duration
}

// Cache is the cache plugin.
type Cache struct {
	// Zones whose answers are cached ("." for every one).
	Zones []string
	// SuccessCap, SuccessTTL and SuccessMinTTL bound positive answers: how
	// many, and the TTLs they are kept for (clamped into [min, max]);
	// Denial* the same for NXDOMAIN and NODATA.
	SuccessCap    int
	SuccessTTL    time.Duration
	SuccessMinTTL time.Duration
	DenialCap     int
	DenialTTL     time.Duration
	DenialMinTTL  time.Duration
	// ServfailTTL is how long a SERVFAIL is kept (0: not at all).
	ServfailTTL time.Duration
	// DisableSuccess and DisableDenial are zones whose positive, or
	// negative, answers are not cached.
	DisableSuccess []string
	DisableDenial  []string
	// KeepTTL answers from the cache with the TTLs as received.
	KeepTTL bool
}

// Notice is an option clusterdns accepts and ignores, where it was and why.
type Notice struct {
	File   string
	Line   int
	Plugin string
	Option string
	Why    string
}

func (n Notice) String() string {
	return fmt.Sprintf("%s:%d: %s: %s ignored: %s", n.File, n.Line, n.Plugin, n.Option, n.Why)
}

// Error is a Corefile that clusterdns refuses: where, which plugin and
// option, what is wrong and what to do about it.
type Error struct {
	File   string
	Line   int
	Plugin string // "" for the server block itself
	Option string // "" for the plugin itself
	Msg    string
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%d: ", e.File, e.Line)
	if e.Plugin != "" {
		fmt.Fprintf(&b, "plugin %s: ", e.Plugin)
	}
	if e.Option != "" {
		fmt.Fprintf(&b, "option %s: ", e.Option)
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Load reads and parses the Corefile at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("corefile: %w", err)
	}
	return Parse(path, data)
}

// Parse reads a Corefile with CoreDNS's own parser (github.com/coredns/caddy's
// caddyfile: tokens, quotes, blocks, snippets, import, {$ENV}) and checks
// every plugin and option: one clusterdns does not implement is an error that
// names it, its line and what to remove, never skipped. Every problem found
// is reported, joined.
func Parse(filename string, data []byte) (*Config, error) {
	blocks, err := caddyfile.Parse(filename, bytes.NewReader(data), nil)
	if err != nil {
		return nil, fmt.Errorf("corefile: %w", err)
	}
	if len(blocks) == 0 {
		return nil, &Error{File: filename, Line: 1, Msg: "no server block: clusterdns needs one, as kubeadm's \".:53 { ... }\""}
	}
	if len(blocks) > 1 {
		line := firstLine(blocks[1])
		return nil, &Error{File: filename, Line: line, Msg: fmt.Sprintf(
			"a second server block (%s): clusterdns serves one; merge it into the first or remove it", strings.Join(blocks[1].Keys, " "))}
	}
	p := &parser{file: filename, cfg: &Config{File: filename}}
	p.serverBlock(blocks[0])
	if err := errors.Join(p.errs...); err != nil {
		return nil, err
	}
	return p.cfg, nil
}

// Digest is what the reload plugin compares: SHA-512 of the parsed server
// blocks as JSON (CoreDNS's reload.parse), so that comments and spacing do
// not count as a change.
func Digest(filename string, data []byte) ([sha512.Size]byte, error) {
	blocks, err := caddyfile.Parse(filename, bytes.NewReader(data), nil)
	if err != nil {
		return [sha512.Size]byte{}, fmt.Errorf("corefile: %w", err)
	}
	b, err := json.Marshal(blocks)
	if err != nil {
		return [sha512.Size]byte{}, fmt.Errorf("corefile: %w", err)
	}
	return sha512.Sum512(b), nil
}

func firstLine(b caddyfile.ServerBlock) int {
	line := 0
	for _, toks := range b.Tokens {
		if len(toks) > 0 && (line == 0 || toks[0].Line < line) {
			line = toks[0].Line
		}
	}
	return max(line, 1)
}

// parser checks one server block into cfg, collecting every error.
type parser struct {
	file string
	cfg  *Config
	errs []error
}

func (p *parser) fail(line int, plugin, option, format string, args ...any) {
	p.errs = append(p.errs, &Error{File: p.file, Line: line, Plugin: plugin, Option: option, Msg: fmt.Sprintf(format, args...)})
}

func (p *parser) ignore(line int, plugin, option, why string) {
	p.cfg.Ignored = append(p.cfg.Ignored, Notice{File: p.file, Line: line, Plugin: plugin, Option: option, Why: why})
}

// serverBlock reads the block's keys (".:53") and each plugin, in CoreDNS's
// plugin order, which is the order they run in whatever order they are
// written.
func (p *parser) serverBlock(b caddyfile.ServerBlock) {
	line := firstLine(b) - 1
	p.keys(max(line, 1), b.Keys)
	names := make([]string, 0, len(b.Tokens))
	for name := range b.Tokens {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int { return pluginOrder(a) - pluginOrder(b) })
	for _, name := range names {
		toks := b.Tokens[name]
		d := caddyfile.NewDispenserTokens(p.file, toks)
		parse, ok := plugins[name]
		if !ok {
			p.refusePlugin(name, toks)
			continue
		}
		parse(p, &d)
	}
	if _, ok := b.Tokens["kubernetes"]; !ok {
		p.fail(max(line, 1), "", "", "no kubernetes plugin: clusterdns is a cluster's DNS; add \"kubernetes cluster.local in-addr.arpa ip6.arpa\" as kubeadm's Corefile has it")
	}
}

// keys reads the server block's keys: one zone, "." with an optional port and
// the dns:// scheme, as kubeadm writes ".:53".
func (p *parser) keys(line int, keys []string) {
	if len(keys) != 1 {
		p.fail(line, "", "", "server block keys %q: clusterdns serves one zone, \".\" (as kubeadm's \".:53\"); keep only that key", keys)
		return
	}
	key := keys[0]
	rest, scheme := key, "dns"
	if i := strings.Index(key, "://"); i >= 0 {
		scheme, rest = key[:i], key[i+3:]
	}
	if scheme != "dns" {
		p.fail(line, "", "", "server block %q: transport %s://: clusterdns serves plain DNS only; write \".:53\"", key, scheme)
		return
	}
	zone, port := rest, "53"
	if i := strings.LastIndex(rest, ":"); i >= 0 {
		zone, port = rest[:i], rest[i+1:]
	}
	if zone == "" {
		zone = "."
	}
	if dns.CanonicalName(zone) != "." {
		p.fail(line, "", "", "server block %q: zone %s: clusterdns serves the root zone \".\" (its kubernetes and forward plugins choose names); write \".:%s\"", key, zone, port)
		return
	}
	if n, err := parsePort(port); err != nil {
		p.fail(line, "", "", "server block %q: port %q: %v", key, port, err)
		return
	} else {
		port = n
	}
	p.cfg.Zones = []string{"."}
	p.cfg.Listen = net.JoinHostPort("", port)
	p.cfg.Server = "dns://" + p.cfg.Listen
}

func parsePort(s string) (string, error) {
	var n int
	if _, err := fmt.Sscanf(s, "%d", &n); err != nil || fmt.Sprint(n) != s || n < 0 || n > 65535 {
		return "", errors.New("not a port number")
	}
	return s, nil
}

// refusePlugin is the error for a plugin clusterdns does not implement: a
// CoreDNS plugin clusterdns has no equivalent of, or no plugin at all.
func (p *parser) refusePlugin(name string, toks []caddyfile.Token) {
	line := toks[0].Line
	what := "clusterdns does not implement it"
	if pluginOrder(name) == len(coreDNSPlugins) {
		what = "no such plugin in CoreDNS v1.14.6 (a typo?)"
	}
	p.fail(line, name, "", "%s; remove the line %q%s", what, lineText(toks, line), blockNote(toks))
}

// lineText is the text of the tokens on line, as a user finds it in the file.
func lineText(toks []caddyfile.Token, line int) string {
	var words []string
	for _, t := range toks {
		if t.Line == line {
			words = append(words, t.Text)
		}
	}
	return strings.Join(words, " ")
}

// blockNote says " and its block" when the plugin's tokens open one.
func blockNote(toks []caddyfile.Token) string {
	for _, t := range toks {
		if t.Text == "{" {
			return " and its block { ... }"
		}
	}
	return ""
}

// isReverse reports whether zone (a lower-case FQDN) is in in-addr.arpa or
// ip6.arpa.
func isReverse(zone string) bool {
	return dns.IsSubDomain("in-addr.arpa.", zone) || dns.IsSubDomain("ip6.arpa.", zone)
}

// zoneName normalises a zone argument: a lower-case FQDN. ok is false for
// what is not a domain name (a CIDR, a URL).
func zoneName(s string) (string, bool) {
	if strings.ContainsAny(s, "/:@") {
		return "", false
	}
	z := dns.CanonicalName(s)
	if _, ok := dns.IsDomainName(z); !ok {
		return "", false
	}
	return z, true
}

// hostPort reads an upstream: an IP, IP:port, or either with dns://; a bare
// IP gets port 53.
func hostPort(s string) (string, bool) {
	s = strings.TrimPrefix(s, "dns://")
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.String(), true
	}
	if ip, err := netip.ParseAddr(s); err == nil && ip.Zone() == "" {
		return netip.AddrPortFrom(ip, 53).String(), true
	}
	return "", false
}
