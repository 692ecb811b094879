package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
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

// Where TestWebPage leaves its picture of the page (paths from test/lab,
// where go test runs). Every run writes screenshotOut, in the module's bin/
// (ignored by git, where `make build` puts the binaries) for a person to
// look at; only -update-screenshot also rewrites docsScreenshot, the picture
// docs/web.md shows, so that `make test` leaves the tracked file alone.
const (
	screenshotOut  = "../../bin/svclab-web.png"
	docsScreenshot = "../../docs/images/svclab-web.png"
)

var updateScreenshot = flag.Bool("update-screenshot", false, "TestWebPage: also write the page's picture to docs/images/svclab-web.png")

// TestWebPage opens `svclab web` in a real headless chromium against a
// real hybrid lab and does what a learner does: the page loads with the
// lab's hosts, traffic sent from a control makes the counters rise and
// the promotion of web:http appears on the timeline, a trace draws its
// hops, and un-readying a pod shows in web's endpoints. The lab's hybrid
// mode promotes at 10 new connections per second held for 2 s
// (lab/node.go), so 300 requests at 40 per second promote web:http within
// a few seconds.
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
	if code := getJSONURL(t, url+"api/trace?from=client&service=web", &rep); code != http.StatusOK || len(rep.Hops) == 0 {
		t.Fatalf("/api/trace: %d %+v, want hops", code, rep)
	}

	// The page in a real browser.
	bctx := browser(t, chromium)
	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, scancel := context.WithTimeout(bctx, 60*time.Second)
		defer scancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	waitFor := func(what, expr string) {
		t.Helper()
		step(what, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(200*time.Millisecond), chromedp.WithPollingTimeout(50*time.Second)))
	}
	count := `(() => { const p = document.querySelector('[data-port="default/web:http"]');
		return p ? Number(p.querySelector('.userspace-count').textContent) + Number(p.querySelector('.kernel-count').textContent) : -1; })()`
	step("load the page", chromedp.Navigate(url),
		chromedp.WaitVisible(chromedp.CSS(`#hosts tr[data-host="web-0"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-port="default/web:http"]`)))

	step("send traffic", chromedp.SetValue(chromedp.CSS("#traffic-n"), "300"), chromedp.SetValue(chromedp.CSS("#traffic-rate"), "40"),
		chromedp.SetValue(chromedp.CSS("#traffic-target"), "web"), chromedp.Click(chromedp.CSS("#traffic-go")))
	waitFor("the command listed", `[...document.querySelectorAll('#commands .command')].some((c) => c.textContent === '$ svclab traffic --n 300 --rate 40 web')`)
	waitFor("web's counters rise", count+` >= 20`)
	waitFor("web's counters rise again", count+` >= 80`)
	waitFor("the promotion on the timeline", `document.querySelectorAll('#chart .mark.promotion').length > 0`)
	waitFor("web's path is the kernel's", `(document.querySelector('[data-port="default/web:http"] .path')||{}).textContent !== 'userspace'`)

	step("trace from client to web", chromedp.SetValue(chromedp.CSS("#trace-from"), "client"), chromedp.SetValue(chromedp.CSS("#trace-service"), "web"),
		chromedp.Click(chromedp.CSS("#trace-go")))
	waitFor("the trace's hops", `document.querySelectorAll('#trace .hop').length >= 3 && /DNAT/.test(document.querySelector('#trace .result').textContent)`)

	step("un-ready web-1", chromedp.SetValue(chromedp.CSS("#pod-name"), "web-1"), chromedp.SetValue(chromedp.CSS("#pod-change"), "ready=false"),
		chromedp.Click(chromedp.CSS("#pod-go")))
	waitFor("web-1 not ready in web's endpoints", `!!document.querySelector('[data-port="default/web:http"] .ep.notready[data-pod="web-1"]')`)
	waitFor("the traffic's command done", `[...document.querySelectorAll('#commands li.done .command')].some((c) => c.textContent.startsWith('$ svclab traffic'))`)

	sctx, scancel := context.WithTimeout(bctx, 30*time.Second)
	defer scancel()
	png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	writeScreenshot(t, screenshotOut, png)
	if *updateScreenshot {
		writeScreenshot(t, docsScreenshot, png)
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
		chromedp.WindowSize(1280, 1400),
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
