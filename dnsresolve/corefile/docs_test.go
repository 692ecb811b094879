package corefile

import (
	"fmt"
	"go/ast"
	goparser "go/parser"
	"go/token"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// docRow is one row of docs/operations.md's table of Corefile plugins and
// options.
type docRow struct {
	plugin   string   // "server block", "*" for any other CoreDNS plugin
	options  []string // the option keywords the row is about; none: the plugin and its arguments
	status   string   // honoured, ignored or refused
	mentions []string // every word written in backquotes in the option and why cells
}

const (
	pluginsBegin = "<!-- BEGIN Corefile plugins"
	pluginsEnd   = "<!-- END Corefile plugins -->"
)

// docRows reads the table.
func docRows(t *testing.T) []docRow {
	t.Helper()
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, pluginsBegin), strings.Index(doc, pluginsEnd)
	if i < 0 || j < i {
		t.Fatalf("docs/operations.md: no table between %q and %q", pluginsBegin, pluginsEnd)
	}
	keyword := regexp.MustCompile(`^[a-z][a-z_]*$`)
	var rows []docRow
	for _, line := range strings.Split(doc[i:j], "\n")[1:] {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| plugin |") {
			continue
		}
		cells := splitRow(line)
		if len(cells) != 4 {
			t.Fatalf("docs/operations.md: a row of %d cells: %s", len(cells), line)
		}
		r := docRow{status: cells[2]}
		switch p := backquoted(cells[0]); {
		case cells[0] == "server block":
			r.plugin = cells[0]
		case strings.HasPrefix(cells[0], "any other CoreDNS plugin"):
			r.plugin = "*"
		case len(p) == 1:
			r.plugin = p[0]
		default:
			t.Fatalf("docs/operations.md: plugin cell %q", cells[0])
		}
		for _, span := range backquoted(cells[1]) {
			if w := strings.Fields(span)[0]; keyword.MatchString(w) {
				r.options = append(r.options, w)
			}
		}
		for _, span := range append(backquoted(cells[1]), backquoted(cells[3])...) {
			r.mentions = append(r.mentions, strings.FieldsFunc(span, func(c rune) bool {
				return !unicode.IsLetter(c) && !unicode.IsDigit(c) && c != '_' && c != '-'
			})...)
		}
		rows = append(rows, r)
	}
	if len(rows) < 30 {
		t.Fatalf("docs/operations.md's Corefile table has %d rows", len(rows))
	}
	return rows
}

// splitRow splits a Markdown table row into its trimmed cells; "\|" is a
// "|" within a cell.
func splitRow(line string) []string {
	line = strings.ReplaceAll(line, `\|`, "\x00")
	parts := strings.Split(strings.Trim(line, "|"), "|")
	for i, p := range parts {
		parts[i] = strings.TrimSpace(strings.ReplaceAll(p, "\x00", "|"))
	}
	return parts
}

// backquoted are the spans of s between backquotes.
func backquoted(s string) []string {
	var out []string
	for i, part := range strings.Split(s, "`") {
		if i%2 == 1 && part != "" {
			out = append(out, part)
		}
	}
	return out
}

// parserWords are, per plugin, the words the parser's code compares a
// token with (case clauses, == and !=, and the kubernetes options it
// refuses by name): the options and values it knows. Read from the source,
// so that a word the parser learns and the table lacks fails the test.
func parserWords(t *testing.T) map[string][]string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := goparser.ParseFile(fset, "plugins.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The setup method of each plugin, from the plugins map.
	methods := map[string]string{} // method name -> plugin
	ast.Inspect(f, func(n ast.Node) bool {
		kv, ok := n.(*ast.KeyValueExpr)
		if !ok {
			return true
		}
		key, ok1 := kv.Key.(*ast.BasicLit)
		sel, ok2 := kv.Value.(*ast.SelectorExpr)
		if ok1 && ok2 {
			name, _ := strconv.Unquote(key.Value)
			methods[sel.Sel.Name] = name
		}
		return true
	})
	if len(methods) != len(plugins) {
		t.Fatalf("plugins.go: %d setup methods found, the plugins map has %d", len(methods), len(plugins))
	}
	// A declaration belongs to the plugin whose setup method's name starts
	// its own (kubernetesOption, kubernetesOptionsRefused: kubernetes).
	owner := func(name string) string {
		best := ""
		for m := range methods {
			if strings.HasPrefix(name, m) && len(m) > len(best) {
				best = m
			}
		}
		return methods[best]
	}
	words := map[string][]string{}
	add := func(plugin string, e ast.Expr) {
		if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if w, _ := strconv.Unquote(lit.Value); w != "" && !slices.Contains(words[plugin], w) {
				words[plugin] = append(words[plugin], w)
			}
		}
	}
	for _, decl := range f.Decls {
		var plugin string
		var body ast.Node
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if d.Recv != nil {
				plugin, body = owner(d.Name.Name), d.Body
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				if vs, ok := spec.(*ast.ValueSpec); ok && len(vs.Names) == 1 && owner(vs.Names[0].Name) != "" {
					plugin, body = owner(vs.Names[0].Name), vs
				}
			}
		}
		if plugin == "" {
			continue
		}
		ast.Inspect(body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CaseClause:
				for _, e := range n.List {
					add(plugin, e)
				}
			case *ast.BinaryExpr:
				if n.Op == token.EQL || n.Op == token.NEQ {
					add(plugin, n.X)
					add(plugin, n.Y)
				}
			case *ast.CompositeLit:
				if _, ok := body.(*ast.ValueSpec); ok {
					for _, e := range n.Elts {
						add(plugin, e)
					}
				}
			}
			return true
		})
	}
	return words
}

// probes are a Corefile line for each option of the table (plugin "" for
// the plugin alone): the table says what the parser does with it.
var probes = map[[2]string]string{
	{"bind", ""}:                                    "bind 127.0.0.1",
	{"errors", ""}:                                  "errors",
	{"errors", "consolidate"}:                       "errors {\n consolidate 5m \".*timeout\"\n}",
	{"errors", "stacktrace"}:                        "errors {\n stacktrace\n}",
	{"log", ""}:                                     "log",
	{"health", ""}:                                  "health :8080",
	{"health", "lameduck"}:                          "health {\n lameduck 5s\n}",
	{"ready", ""}:                                   "ready :8181",
	{"ready", "monitor"}:                            "ready {\n monitor continuously\n}",
	{"kubernetes", ""}:                              "kubernetes cluster.local in-addr.arpa ip6.arpa",
	{"kubernetes", "pods"}:                          "pods verified",
	{"kubernetes", "fallthrough"}:                   "fallthrough in-addr.arpa ip6.arpa",
	{"kubernetes", "ttl"}:                           "ttl 30",
	{"kubernetes", "namespaces"}:                    "namespaces default kube-system",
	{"kubernetes", "kubeconfig"}:                    "kubeconfig /etc/coredns/kubeconfig",
	{"kubernetes", "startup_timeout"}:               "startup_timeout 10s",
	{"kubernetes", "apiserver_qps"}:                 "apiserver_qps 50",
	{"kubernetes", "apiserver_burst"}:               "apiserver_burst 100",
	{"kubernetes", "apiserver_max_inflight"}:        "apiserver_max_inflight 10",
	{"kubernetes", "endpoint_pod_names"}:            "endpoint_pod_names",
	{"kubernetes", "endpoint"}:                      "endpoint https://192.0.2.1:6443",
	{"kubernetes", "tls"}:                           "tls cert.pem key.pem ca.pem",
	{"kubernetes", "labels"}:                        "labels app=web",
	{"kubernetes", "namespace_labels"}:              "namespace_labels team=dns",
	{"kubernetes", "noendpoints"}:                   "noendpoints",
	{"kubernetes", "ignore"}:                        "ignore empty_service",
	{"kubernetes", "multicluster"}:                  "multicluster clusterset.local",
	{"prometheus", ""}:                              "prometheus :9153",
	{"prometheus", "runtime_metrics"}:               "prometheus :9153 {\n runtime_metrics\n}",
	{"prometheus", "tls"}:                           "prometheus :9153 {\n tls /etc/coredns/web.yml\n}",
	{"forward", ""}:                                 "forward . 192.0.2.1",
	{"forward", "max_concurrent"}:                   "forward . 192.0.2.1 {\n max_concurrent 1000\n}",
	{"forward", "max_fails"}:                        "forward . 192.0.2.1 {\n max_fails 3\n}",
	{"forward", "health_check"}:                     "forward . 192.0.2.1 {\n health_check 1s no_rec domain probe.example\n}",
	{"forward", "policy"}:                           "forward . 192.0.2.1 {\n policy round_robin\n}",
	{"forward", "except"}:                           "forward . 192.0.2.1 {\n except example.org\n}",
	{"forward", "force_tcp"}:                        "forward . 192.0.2.1 {\n force_tcp\n}",
	{"forward", "prefer_udp"}:                       "forward . 192.0.2.1 {\n prefer_udp\n}",
	{"forward", "failover"}:                         "forward . 192.0.2.1 {\n failover SERVFAIL\n}",
	{"forward", "read_timeout"}:                     "forward . 192.0.2.1 {\n read_timeout 1s\n}",
	{"forward", "expire"}:                           "forward . 192.0.2.1 {\n expire 10s\n}",
	{"forward", "max_age"}:                          "forward . 192.0.2.1 {\n max_age 10s\n}",
	{"forward", "max_idle_conns"}:                   "forward . 192.0.2.1 {\n max_idle_conns 10\n}",
	{"forward", "tls"}:                              "forward . 192.0.2.1 {\n tls\n}",
	{"forward", "tls_servername"}:                   "forward . 192.0.2.1 {\n tls_servername dns.example\n}",
	{"forward", "next"}:                             "forward . 192.0.2.1 {\n next NXDOMAIN\n}",
	{"forward", "next_on_nodata"}:                   "forward . 192.0.2.1 {\n next_on_nodata\n}",
	{"forward", "doh_method"}:                       "forward . 192.0.2.1 {\n doh_method POST\n}",
	{"forward", "resolver"}:                         "forward . 192.0.2.1 {\n resolver 192.0.2.53\n}",
	{"forward", "source_address"}:                   "forward . 192.0.2.1 {\n source_address 192.0.2.9\n}",
	{"forward", "max_connect_attempts"}:             "forward . 192.0.2.1 {\n max_connect_attempts 3\n}",
	{"forward", "failfast_all_unhealthy_upstreams"}: "forward . 192.0.2.1 {\n failfast_all_unhealthy_upstreams\n}",
	{"cache", ""}:                                   "cache 30 cluster.local",
	{"cache", "success"}:                            "cache {\n success 5000 60 10\n}",
	{"cache", "denial"}:                             "cache {\n denial 5000 30\n}",
	{"cache", "disable"}:                            "cache {\n disable success cluster.local\n}",
	{"cache", "servfail"}:                           "cache {\n servfail 5s\n}",
	{"cache", "keepttl"}:                            "cache {\n keepttl\n}",
	{"cache", "prefetch"}:                           "cache {\n prefetch 10\n}",
	{"cache", "serve_stale"}:                        "cache {\n serve_stale\n}",
	{"loop", ""}:                                    "loop",
	{"reload", ""}:                                  "reload 10s",
	{"loadbalance", ""}:                             "loadbalance round_robin",
	{"loadbalance", "weighted"}:                     "loadbalance weighted /etc/coredns/weights",
	{"loadbalance", "prefer"}:                       "loadbalance {\n prefer 198.19.0.0/16\n}",
	{"pprof", ""}:                                   "pprof localhost:6053",
}

// probeCorefile is a Corefile with probe in it: a kubernetes option inside
// the kubernetes block, any other line beside a bare kubernetes plugin.
func probeCorefile(plugin, option, probe string) string {
	if plugin == "kubernetes" && option != "" {
		return ".:53 {\n kubernetes cluster.local {\n  " + probe + "\n }\n}\n"
	}
	if plugin == "kubernetes" {
		return ".:53 {\n " + probe + "\n}\n"
	}
	return ".:53 {\n kubernetes cluster.local\n " + probe + "\n}\n"
}

// outcome is what Parse did with a probe: honoured, ignored or refused.
func outcome(plugin, option, conf string) (string, error) {
	c, err := Parse("Corefile", []byte(conf))
	switch {
	case err != nil && strings.Contains(err.Error(), "plugin "+plugin) && strings.Contains(err.Error(), "clusterdns does not implement it"):
		return "refused", nil
	case err != nil:
		return "", err
	case slices.ContainsFunc(c.Ignored, func(n Notice) bool { return n.Plugin == plugin && n.Option == option }):
		return "ignored", nil
	case len(c.Ignored) > 0:
		return "", fmt.Errorf("notices %v", c.Ignored)
	}
	return "honoured", nil
}

// TestDocsTable holds docs/operations.md's table of Corefile plugins and
// options to the parser: every plugin the parser has is in the table as
// honoured, every word its code knows for a plugin is written in that
// plugin's rows, every option row's probe does what the row says, and
// every other CoreDNS plugin is refused by name.
func TestDocsTable(t *testing.T) {
	rows := docRows(t)
	status := map[[2]string]string{}
	mentions := map[string][]string{}
	for _, r := range rows {
		mentions[r.plugin] = append(mentions[r.plugin], r.mentions...)
		keys := [][2]string{{r.plugin, ""}}
		if len(r.options) > 0 {
			keys = keys[:0]
			for _, o := range r.options {
				keys = append(keys, [2]string{r.plugin, o})
			}
		}
		for _, k := range keys {
			if r.plugin == "server block" || r.plugin == "*" {
				continue
			}
			if s, dup := status[k]; dup && s != r.status {
				t.Errorf("docs: %s %s is both %s and %s", k[0], k[1], s, r.status)
			}
			status[k] = r.status
		}
	}

	for name := range plugins {
		if status[[2]string{name, ""}] != "honoured" {
			t.Errorf("docs: plugin %s has no honoured row of its own", name)
		}
	}
	for k := range status {
		if _, ok := plugins[k[0]]; !ok {
			t.Errorf("docs: plugin %s has rows, the parser has no such plugin", k[0])
		}
	}

	for plugin, ws := range parserWords(t) {
		for _, w := range ws {
			if !slices.Contains(mentions[plugin], w) {
				t.Errorf("docs: the parser knows %q for plugin %s; its rows do not say it", w, plugin)
			}
		}
	}

	keys := slices.SortedFunc(maps.Keys(status), func(a, b [2]string) int {
		return strings.Compare(a[0]+" "+a[1], b[0]+" "+b[1])
	})
	for _, k := range keys {
		probe, ok := probes[k]
		if !ok {
			t.Errorf("docs: %s %s: no probe in this test; add one", k[0], k[1])
			continue
		}
		got, err := outcome(k[0], k[1], probeCorefile(k[0], k[1], probe))
		if err != nil {
			t.Errorf("%s %s: probe %q: %v", k[0], k[1], probe, err)
			continue
		}
		if got != status[k] {
			t.Errorf("%s %s: probe %q is %s, docs say %s", k[0], k[1], probe, got, status[k])
		}
	}
	for k := range probes {
		if _, ok := status[k]; !ok {
			t.Errorf("probe %s %s: no row of the docs", k[0], k[1])
		}
	}

	for _, name := range coreDNSPlugins {
		if _, ok := plugins[name]; ok {
			continue
		}
		_, err := Parse("Corefile", []byte(".:53 {\n kubernetes cluster.local\n "+name+"\n}\n"))
		if want := "Corefile:3: plugin " + name + ": clusterdns does not implement it"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("plugin %s: %v, want %q", name, err, want)
		}
	}
}
