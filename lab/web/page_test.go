package web

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestPageControls opens the page in a headless chromium over a fake lab
// (test/lab's TestWebPage does it on a real one): two controls clicked in
// the same moment both run, one after the other, the second saying it is
// queued; a control that fails with a long message shows it wrapped, and
// the page never grows wider than its window.
func TestPageControls(t *testing.T) {
	chromium := ""
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			chromium = p
			break
		}
	}
	if chromium == "" {
		t.Skip("no chromium on PATH (scripts/install-deps.sh installs Debian's)")
	}
	f := &fakeLab{}
	f.set("userspace", 0, 0)
	g := &gate{release: make(chan struct{})}
	long := "svcproxy did not apply the changed services.yaml: " + strings.Repeat("a-very-long-word-without-spaces", 16)
	run := func(ctx context.Context, args []string) (string, error) {
		if args[0] == "traffic" {
			return "", errors.New(long)
		}
		return g.run(ctx, args)
	}
	s := NewServer(Config{Lab: f, Run: run, Prefix: "svclab"})
	s.poll(t.Context())
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)

	actx, acancel := chromedp.NewExecAllocator(context.Background(), chromedp.ExecPath(chromium), chromedp.Headless,
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 1000))
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); acancel() })
	// The first Do starts the browser, which lives as long as its context:
	// ctx, not a step's.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
		defer scancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	waitFor := func(what, expr string) {
		t.Helper()
		step(what, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second)))
	}
	step("load the page", chromedp.Navigate(ts.URL), chromedp.WaitVisible(chromedp.CSS(`[data-port="default/web:http"]`)))
	waitFor("the controls filled", `document.querySelectorAll('#pod-name option').length > 0 && document.querySelectorAll('#mode-name option').length > 0`)
	step("un-ready web-1 and switch mode in one moment",
		chromedp.SetValue(chromedp.CSS("#pod-name"), "web-1"), chromedp.SetValue(chromedp.CSS("#pod-change"), "ready=false"),
		chromedp.SetValue(chromedp.CSS("#mode-name"), "iptables"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('pod-go').click(); document.getElementById('mode-go').click();`))
	waitFor("the mode switch queued behind the pod change, and the page saying so",
		`/^queued: \$ svclab mode iptables runs when #1 has ended/.test(document.querySelector('#control-note').textContent) &&
		!!document.querySelector('#commands li.running') && /runs when #1/.test(document.querySelector('#commands li.queued .state').textContent)`)
	g.release <- struct{}{}
	g.release <- struct{}{}
	waitFor("both done, in the order clicked", `(() => {
		const done = [...document.querySelectorAll('#commands li.done .command')].map((c) => c.textContent);
		return done.length === 2 && done[0] === '$ svclab mode iptables' && done[1] === '$ svclab pod web-1 --ready=false'; })()`)
	step("a control that fails", chromedp.Click(chromedp.CSS("#traffic-go")))
	waitFor("its message shown", `/a-very-long-word/.test((document.querySelector('#commands li.failed .state')||{}).textContent || '')`)
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	width, err := chromedp.Run(sctx, chromedp.Evaluate[string](`document.documentElement.scrollWidth + ' ' + window.innerWidth`))
	if err != nil {
		t.Fatal(err)
	}
	var page, window int
	if _, err := fmt.Sscan(width, &page, &window); err != nil || page > window {
		t.Errorf("the page is %d px wide in a %d px window: a long message widened it", page, window)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.most != 1 {
		t.Errorf("%d commands ran at once, want 1", g.most)
	}
}
