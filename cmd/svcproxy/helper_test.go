package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/modes"
)

// TestHelperSvcproxy is not a test: TestIPVSFallback runs the test binary as
// svcproxy inside the node namespace (os/exec's helper-process pattern), so no
// build step is needed.
func TestHelperSvcproxy(t *testing.T) {
	if os.Getenv("SVCPROXY_HELPER") != "1" {
		t.Skip("the svcproxy process of TestIPVSFallback")
	}
	args := os.Args[slices.Index(os.Args, "--")+1:]
	cfg, err := parseFlags(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "svcproxy:", err)
		os.Exit(2)
	}
	var w io.Writer = os.Stderr
	if path := os.Getenv("SVCPROXY_HELPER_LOG"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "svcproxy:", err)
			os.Exit(2)
		}
		w = io.MultiWriter(os.Stderr, f)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if cfg.Cleanup {
		if err := modes.Cleanup(ctx, cfg.modes(slog.New(slog.DiscardHandler))); err != nil {
			fmt.Fprintln(os.Stderr, "svcproxy: cleanup:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if err := run(ctx, cfg, slog.New(slog.NewTextHandler(w, nil))); err != nil {
		fmt.Fprintln(os.Stderr, "svcproxy:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// helperCommand is this test binary run as svcproxy with args
// (TestHelperSvcproxy) in ns.
func helperCommand(ctx context.Context, ns *netnstest.NS, args ...string) *exec.Cmd {
	return ns.Command(ctx, "env", append([]string{"SVCPROXY_HELPER=1", os.Args[0], "-test.run=^TestHelperSvcproxy$", "--"}, args...)...)
}

// startServing runs svcproxy (helperCommand) in ns with its health and
// metrics servers on the namespace's loopback, where getIn reaches them,
// and args, until the test ends. It returns the log up to the readiness
// signal, both HTTP servers listening (two "serving" lines), and fails the
// test if svcproxy ends before; stop sends SIGTERM and waits for the
// process, exited waits for it to end by itself and returns the rest of
// its log and how it ended.
func startServing(t *testing.T, ns *netnstest.NS, args ...string) (lines []string, stop func(), exited func() ([]string, error)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cmd := helperCommand(ctx, ns, append([]string{"--healthz-bind-address", "127.0.0.1:10256", "--metrics-bind-address", "127.0.0.1:10249"}, args...)...)
	logs, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(logs)
	for serving := 0; serving < 2; {
		if !sc.Scan() {
			t.Fatalf("svcproxy ended before it served:\n%s", strings.Join(lines, "\n"))
		}
		lines = append(lines, sc.Text())
		if strings.Contains(sc.Text(), "msg=serving") {
			serving++
		}
	}
	drained := make(chan struct{})
	var rest []string
	go func() { // keep the pipe drained until the process ends
		for sc.Scan() {
			rest = append(rest, sc.Text())
		}
		io.Copy(io.Discard, logs)
		close(drained)
	}()
	t.Logf("svcproxy log:\n%s", strings.Join(lines, "\n"))
	t.Cleanup(func() {
		if t.Failed() {
			cmd.Process.Kill()
			<-drained
			t.Logf("svcproxy log after it served:\n%s", strings.Join(rest, "\n"))
		}
	})
	return lines, func() {
			cmd.Process.Signal(syscall.SIGTERM)
			<-drained
			cmd.Wait()
		}, func() ([]string, error) {
			<-drained
			return rest, cmd.Wait()
		}
}

// getIn makes one GET inside ns and returns the body of a 200 answer: the
// socket is made on the namespace's thread (http.Client would dial on a
// goroutine of its own, outside the namespace).
func getIn(ns *netnstest.NS, addr, path string) (string, error) {
	code, body, err := getStatusIn(ns, addr, path)
	if err == nil && code != http.StatusOK {
		return "", fmt.Errorf("GET %s: %d: %s", path, code, body)
	}
	return body, err
}

// getStatusIn is getIn for any answer: its status code and body.
func getStatusIn(ns *netnstest.NS, addr, path string) (int, string, error) {
	var c net.Conn
	if err := ns.Do(func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	}); err != nil {
		return 0, "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, addr)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// waitHealthy waits until the helper's /healthz says 200: its first sync is
// done.
func waitHealthy(t *testing.T, ns *netnstest.NS) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := getIn(ns, "127.0.0.1:10256", "/healthz")
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
