package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/lab"
	"github.com/svcproxy/svcproxy/lab/topology"
	"github.com/svcproxy/svcproxy/lab/views"
)

// Where TestWebPage leaves its pictures of the page (paths from test/lab,
// where go test runs). Every run writes them to the module's bin/ (ignored
// by git, where `make build` puts the binaries) for a person to look at;
// only -update-screenshot also rewrites the pictures docs/web.md shows, so
// that `make test` leaves the tracked files alone.
const (
	screenshotDir     = "../../bin"
	docsScreenshotDir = "../../docs/images"
)

var updateScreenshot = flag.Bool("update-screenshot", false, "TestWebPage: also write the page's pictures to docs/images")

// TestWebPage opens `svclab web` in a real headless chromium against one
// real lab and does what a learner does, in two modes. In hybrid mode: the
// page loads with the lab's picture, traffic sent from a control makes the
// counters rise and the promotion of web:http appear on the timeline, and a
// trace from the outside host draws the packet's way: the DNAT and the
// MASQUERADE in the node with the addresses before and after, the reply
// back through conntrack, conntrack's entry, and another way followed by
// its button. Then two controls within 100 ms (un-ready web-1, switch to
// userspace) both succeed, the second queued behind the first, and the
// page keeps its width, a failed control's message too. In userspace mode
// a trace draws the REDIRECT and svcproxy's second connection, and the
// conntrack panel lists both connections of each request. The lab's hybrid
// mode promotes at 10 new connections per second held for 2 s
// (lab/cluster/daemons.go), so 300 requests at 40 per second promote
// web:http within a few seconds.
func TestWebPage(t *testing.T) {
	netnstest.RequireRoot(t, lab.DemoTools...)
	chromium := findChromium()
	if chromium == "" {
		t.Skip("needs chromium, Debian's headless browser (apt-get install chromium; make test installs it through scripts/install-deps.sh)")
	}
	bin := build(t)
	t.Cleanup(func() {
		down(t, bin)
		requireClean(t, bin)
	})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if out, err := svclab(ctx, bin, "web", "--help"); err != nil || !strings.Contains(out, "--listen") || !strings.Contains(out, "loopback only (127.0.0.1:8088)") {
		t.Errorf("svclab web --help must name --listen and say it serves on loopback only: %v\n%s", err, out)
	}
	if out, err := svclab(ctx, bin, "up", "--mode", "hybrid"); err != nil {
		t.Fatalf("svclab up --mode hybrid: %v\n%s", err, out)
	}
	url := startWeb(t, bin)

	// The JSON endpoints against the real lab.
	st := waitState(t, url)
	if len(st.Hosts) == 0 || st.Hosts[0].Name != "node" {
		t.Fatalf("/api/state: hosts %+v, want the node first", st.Hosts)
	}
	web := st.port("default/web:http")
	if web == nil || web.Path != "userspace" || len(web.Endpoints) != 3 {
		t.Fatalf("/api/state: default/web:http is %+v, want 3 endpoints in userspace before any traffic", web)
	}
	var rep views.TraceReport
	if code := getJSONURL(t, url+"api/trace?from=client&service=web", &rep); code != http.StatusOK || len(rep.Hops) == 0 || len(rep.Path.Steps) == 0 {
		t.Fatalf("/api/trace: %d %+v, want hops and the packet's steps", code, rep)
	}
	var ct views.ConntrackView
	if code := getJSONURL(t, url+"api/conntrack?service=web", &ct); code != http.StatusOK || ct.Mode != "hybrid" {
		t.Fatalf("/api/conntrack: %d %+v, want web's entries in hybrid mode", code, ct)
	}

	p := newPage(t, chromium)
	p.step("load the page", chromedp.Navigate(url),
		chromedp.WaitVisible(chromedp.CSS(`#topology g.host[data-host="web-0"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-port="default/web:http"]`)))
	p.watchWidth()

	// Hybrid: traffic promotes web:http to nftables.
	count := `(() => { const p = document.querySelector('[data-port="default/web:http"]');
		return p ? Number(p.querySelector('.userspace-count').textContent) + (Number(p.querySelector('.kernel-count').textContent) || 0) : -1; })()`
	p.step("send traffic", chromedp.SetValue(chromedp.CSS("#traffic-n"), "300"), chromedp.SetValue(chromedp.CSS("#traffic-rate"), "40"),
		chromedp.SetValue(chromedp.CSS("#traffic-target"), "web"), chromedp.Click(chromedp.CSS("#traffic-go")))
	p.waitFor("the command listed", `[...document.querySelectorAll('#commands .command')].some((c) => c.textContent === '$ svclab traffic --n 300 --rate 40 web')`)
	p.waitFor("web's counters rise", count+` >= 20`)
	p.waitFor("web's counters rise again", count+` >= 80`)
	p.waitFor("the promotion on the timeline", `document.querySelectorAll('#chart .mark.promotion').length > 0`)
	p.waitFor("web's path is the kernel's", `(document.querySelector('[data-port="default/web:http"] .path')||{}).textContent === 'nftables'`)
	p.waitFor("the kernel counts say what they count", `/named counter/.test(document.querySelector('#kernel-note').textContent)`)
	p.waitFor("the traffic's command done", `[...document.querySelectorAll('#commands li.done .command')].some((c) => c.textContent.startsWith('$ svclab traffic'))`)

	// A trace from outside the cluster: DNAT, then MASQUERADE, and the
	// reply back through conntrack, in the table and on the picture.
	p.step("trace from outside to web", chromedp.SetValue(chromedp.CSS("#trace-from"), "outside"), chromedp.SetValue(chromedp.CSS("#trace-service"), "web"),
		chromedp.Click(chromedp.CSS("#trace-go")))
	p.waitFor("the DNAT with the addresses before and after", `(() => {
		const d = document.querySelector('#packet-steps tr[data-what="DNAT"] td.dst.changed');
		return !!d && d.querySelector('.before').textContent === '198.18.0.20:80' && /^198\.19\.1\.1[012]:8080$/.test(d.querySelector('.after').textContent); })()`)
	p.waitFor("the MASQUERADE with the addresses before and after", `(() => {
		const s = document.querySelector('#packet-steps tr[data-what="MASQUERADE"] td.src.changed');
		return !!s && s.querySelector('.before').textContent === '198.19.200.2:P' && s.querySelector('.after').textContent === '198.19.0.1:P'; })()`)
	p.waitFor("the reply back through conntrack", `(() => {
		const r = document.querySelector('#packet-steps tr[data-reply="true"][data-what="conntrack"] td.src.changed');
		return !!r && r.querySelector('.after').textContent === '198.18.0.20:80'; })()`)
	p.waitFor("the packet's way on the picture, there and back", `document.querySelectorAll('#topology g.hop[data-reply="false"][data-conn="1"]').length === 2 &&
		document.querySelectorAll('#topology g.hop[data-reply="true"]').length === 2 &&
		!!document.querySelector('#topology text.event.rewrite[data-what="DNAT"][data-at="node"]') &&
		!!document.querySelector('#topology text.event.rewrite[data-what="MASQUERADE"][data-at="node"]')`)
	p.waitFor("conntrack's entry", `document.querySelectorAll('#packet-conntrack tr.entry').length === 1 &&
		/MASQUERADE: the pod saw 198\.19\.0\.1 \(node\)/.test(document.querySelector('#packet-conntrack tr.entry').textContent)`)
	p.waitFor("every way with its chance", `document.querySelectorAll('#ways li.way').length === 3 &&
		[...document.querySelectorAll('#ways .p')].every((p) => p.textContent === '33.3%')`)
	p.step("follow way 2", chromedp.Click(chromedp.CSS(`#ways li[data-pick="2"] button`)))
	p.waitFor("way 2 followed to its pod", `(() => {
		const way = document.querySelector('#ways li.picked');
		const after = document.querySelector('#packet-steps tr[data-what="DNAT"] .after');
		return !!way && way.dataset.pick === '2' && !!after && way.textContent.includes(after.textContent); })()`)
	p.screenshot("svclab-web.png")
	p.screenshotOf("#lab-section", "svclab-web-packet.png")

	// Two controls within 100 ms: both succeed, one after the other.
	p.step("un-ready web-1 and switch to userspace at once",
		chromedp.SetValue(chromedp.CSS("#pod-name"), "web-1"), chromedp.SetValue(chromedp.CSS("#pod-change"), "ready=false"),
		chromedp.SetValue(chromedp.CSS("#mode-name"), "userspace"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('pod-go').click(); document.getElementById('mode-go').click();`))
	p.waitFor("the second control queued, and saying so", `/^queued: \$ svclab mode userspace runs when #\d+ has ended/.test(document.querySelector('#control-note').textContent)`)
	p.waitFor("both controls done", `['$ svclab pod web-1 --ready=false', '$ svclab mode userspace'].every((cmd) =>
		[...document.querySelectorAll('#commands li.done .command')].some((c) => c.textContent === cmd))`)
	p.check("no control failed", `document.querySelectorAll('#commands li.failed').length === 0`)
	p.waitFor("web-1 not ready in web's endpoints", `!!document.querySelector('[data-port="default/web:http"] .ep.notready[data-pod="web-1"]')`)
	p.waitFor("userspace mode", `document.querySelector('#mode').textContent === 'svcproxy --mode userspace'`)
	// A port web's ClusterIP does not have: every request is refused.
	p.step("a control that fails", chromedp.SetValue(chromedp.CSS("#traffic-rate"), "0"),
		chromedp.Evaluate[chromedp.Void](`control({ action: 'traffic', target: '198.18.0.20:81', n: 3 })`))
	p.waitFor("its failure shown", `[...document.querySelectorAll('#commands li.failed .command')].some((c) => c.textContent === '$ svclab traffic --n 3 198.18.0.20:81')`)

	// Userspace: the REDIRECT, and svcproxy's second connection.
	p.step("trace from client to web", chromedp.SetValue(chromedp.CSS("#trace-from"), "client"), chromedp.Click(chromedp.CSS("#trace-go")))
	p.waitFor("the REDIRECT to svcproxy's listener", `(() => {
		const d = document.querySelector('#packet-steps tr[data-what="REDIRECT"] td.dst.changed');
		return !!d && d.querySelector('.before').textContent === '198.18.0.20:80' && /^198\.19\.0\.1:\d+$/.test(d.querySelector('.after').textContent); })()`)
	p.waitFor("svcproxy's second connection, to a ready pod", `(() => {
		const open = document.querySelector('#packet-steps tr[data-conn="2"][data-kind="send"][data-reply="false"]');
		return !!open && /^198\.19\.1\.1[02]:8080$/.test(open.querySelector('td.dst').textContent) &&
			open.querySelector('td.src').textContent === '198.19.0.1:Q'; })()`)
	p.waitFor("both connections on the picture, and their replies", `document.querySelectorAll('#topology g.hop.conn2').length === 1 &&
		document.querySelectorAll('#topology g.hop.conn1').length === 1 && document.querySelectorAll('#topology g.hop.reply').length === 2`)
	p.waitFor("conntrack's two entries", `document.querySelectorAll('#packet-conntrack tr.entry').length === 2 &&
		/second connection/.test(document.querySelector('#packet-conntrack tr.entry.conn2').textContent)`)
	p.waitFor("the round-robin said", `/round-robin/.test(document.querySelector('#ways-why').textContent) && document.querySelectorAll('#ways li.way').length === 2`)
	p.waitFor("the kernel counts nothing, and the page says so", `document.querySelector('[data-port="default/web:http"] .kernel-count').textContent === 'not counted' &&
		/userspace mode/.test(document.querySelector('#kernel-note').textContent)`)

	// The conntrack panel after traffic: two entries per request.
	p.step("send four requests", chromedp.SetValue(chromedp.CSS("#traffic-n"), "4"), chromedp.SetValue(chromedp.CSS("#traffic-target"), "web"),
		chromedp.Click(chromedp.CSS("#traffic-go")))
	p.waitFor("conntrack read when the traffic ended", `document.querySelectorAll('#conntrack tr.entry').length >= 8 &&
		[...document.querySelectorAll('#conntrack tr.entry')].some((r) => /userspace: the second connection/.test(r.textContent))`)
	p.screenshotOf("#lab-section", "svclab-web-userspace.png")
	p.checkWidth()
}

// page is a headless chromium on `svclab web`, with the steps a test
// takes there.
type page struct {
	t    *testing.T
	ctx  context.Context
	wide chan string // what made the page wider than the window, first
}

func newPage(t *testing.T, chromium string) *page {
	return &page{t: t, ctx: browser(t, chromium), wide: make(chan string, 1)}
}

// step runs actions, failing the test after a minute.
func (p *page) step(what string, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	sctx, scancel := context.WithTimeout(p.ctx, 60*time.Second)
	defer scancel()
	if err := chromedp.Do(sctx, actions...); err != nil {
		p.t.Fatalf("%s: %v", what, err)
	}
}

// waitFor waits until the JavaScript expression expr is true.
func (p *page) waitFor(what, expr string) {
	p.t.Helper()
	p.step(what, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(200*time.Millisecond), chromedp.WithPollingTimeout(50*time.Second)))
}

// check fails the test unless expr is true now.
func (p *page) check(what, expr string) {
	p.t.Helper()
	sctx, scancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer scancel()
	ok, err := chromedp.Run(sctx, chromedp.Evaluate[bool](expr))
	if err != nil || !ok {
		p.t.Fatalf("%s: %s is %v (%v)", what, expr, ok, err)
	}
}

// windowWidth is the browser window's width (browser's WindowSize).
const windowWidth = 1280

// watchWidth has the page note, from now on, the first moment it is wider
// than the window: a word that widens a column (a failed command's
// message, an address) makes the document scroll sideways. It compares
// with the window's own width, not innerWidth, which a screenshot of one
// element shrinks while it is taken.
func (p *page) watchWidth() {
	p.step("watch the page's width", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`
		window.svclabWide = '';
		new ResizeObserver(() => {
			const w = document.documentElement.scrollWidth;
			if (w > %d && !window.svclabWide) window.svclabWide = w + ' px wide in a %d px window';
		}).observe(document.body);`, windowWidth, windowWidth)))
}

// checkWidth fails the test if the page was ever wider than its window.
func (p *page) checkWidth() {
	p.t.Helper()
	sctx, scancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer scancel()
	wide, err := chromedp.Run(sctx, chromedp.Evaluate[string](fmt.Sprintf(`window.svclabWide || (document.documentElement.scrollWidth > %d ? document.documentElement.scrollWidth + ' px wide now' : '')`, windowWidth)))
	if err != nil {
		p.t.Fatal(err)
	}
	if wide != "" {
		p.t.Errorf("the page grew wider than its window: %s", wide)
	}
}

// screenshot writes the whole page to bin/NAME and, with
// -update-screenshot, to docs/images/NAME.
func (p *page) screenshot(name string) {
	p.t.Helper()
	p.shoot(name, chromedp.FullScreenshot(100))
}

// screenshotOf writes the element sel to bin/NAME and, with
// -update-screenshot, to docs/images/NAME: the README shows the lab's
// picture alone.
func (p *page) screenshotOf(sel, name string) {
	p.t.Helper()
	p.shoot(name, chromedp.Screenshot(chromedp.CSS(sel)))
}

func (p *page) shoot(name string, shot chromedp.Action[[]byte]) {
	p.t.Helper()
	sctx, scancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer scancel()
	png, err := chromedp.Run(sctx, shot)
	if err != nil {
		p.t.Fatalf("screenshot: %v", err)
	}
	writeScreenshot(p.t, filepath.Join(screenshotDir, name), png)
	if *updateScreenshot {
		writeScreenshot(p.t, filepath.Join(docsScreenshotDir, name), png)
	}
}

// writeScreenshot writes png to path, making its directory, and logs where.
func writeScreenshot(t *testing.T, path string, png []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(path)
	t.Logf("the page, as chromium drew it: %s (%d bytes)", abs, len(png))
}

// findChromium is Debian's chromium, or "" when it is not installed.
func findChromium() string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browser starts a headless chromium with a fresh profile, closed when the
// test ends. The flags keep it from reaching anything but the page:
// no background networking, component updates, sync or QUIC.
func browser(t *testing.T, path string) context.Context {
	t.Helper()
	profile := t.TempDir()
	actx, acancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox, // root has no user namespace sandbox to give it
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(windowWidth, 1400),
	)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		bcancel()
		acancel() // waits for the browser to exit, before profile is removed
	})
	// The first Run starts the browser, which lives as long as that Run's
	// context: bctx, not a step's context with a timeout.
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return bctx
}

// startWeb starts `svclab web` on a free loopback port and returns the
// page's URL; the test's end stops it.
func startWeb(t *testing.T, bin string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "svclab"), "web", "--listen", "127.0.0.1:0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("svclab web printed no address: %v", err)
	}
	// "svclab web: serving http://127.0.0.1:PORT/ (Ctrl-C stops it)"
	for _, f := range strings.Fields(line) {
		if strings.HasPrefix(f, "http://") {
			return f
		}
	}
	t.Fatalf("svclab web: no address in %q", line)
	return ""
}

// webState is what the test reads of /api/state.
type webState struct {
	Hosts    []topology.HostRow  `json:"hosts"`
	Services *views.ServicesView `json:"services"`
	Error    string              `json:"error"`
}

func (s *webState) port(name string) *views.ServicePortView {
	if s.Services == nil {
		return nil
	}
	for i, p := range s.Services.Ports {
		if p.Name == name {
			return &s.Services.Ports[i]
		}
	}
	return nil
}

// waitState waits for the first State that read the lab's Services.
func waitState(t *testing.T, url string) webState {
	t.Helper()
	var st webState
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		st = webState{}
		if getJSONURL(t, url+"api/state", &st) == http.StatusOK && st.Services != nil {
			return st
		}
	}
	t.Fatalf("/api/state read no Services in 30 s: %+v", st)
	return st
}

func getJSONURL(t *testing.T, url string, into any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode
}
