package userspace

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/service"
)

// fdChildEnv makes the test binary run TestFDExhaustionChild: a proxier in a
// process of its own with a small file limit, as svcproxy on a node that runs
// out of descriptors.
const fdChildEnv = "SVCP_TEST_FD_CHILD_BACKEND"

// TestFDExhaustion: a flood of connections runs the proxier out of its file
// descriptor budget. The connections beyond it are reset at once (not left
// hanging), the refusals are counted and logged once (not once each), and the
// process's other listeners (here an HTTP server standing in for /healthz and
// /metrics) keep working.
func TestFDExhaustion(t *testing.T) {
	be := startTCPBackend(t, direct, "a", "127.0.0.1:0", echo)
	cmd := exec.Command(os.Args[0], "-test.run=^TestFDExhaustionChild$")
	cmd.Env = append(os.Environ(), fdChildEnv+"="+be.addr.String())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := false
	t.Cleanup(func() {
		if !exited {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	var proxyAddr, httpAddr string
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if _, serr := fmt.Sscanf(line, "proxy %s http %s", &proxyAddr, &httpAddr); err != nil || serr != nil {
		t.Fatalf("child said %q, %v; stderr:\n%s", line, err, stderr.String())
	}

	var greeted, reset int
	for range 150 {
		c, err := net.Dial("tcp", proxyAddr)
		if err == nil {
			defer c.Close()
			c.SetReadDeadline(time.Now().Add(20 * time.Second))
			_, err = io.ReadFull(c, make([]byte, 2))
		}
		switch {
		case err == nil:
			greeted++
		case errors.Is(err, syscall.ECONNRESET):
			reset++
		default:
			t.Fatalf("connection %d: %v, want a greeting or a reset", greeted+reset, err)
		}
	}
	if greeted == 0 || reset == 0 {
		t.Fatalf("%d connections greeted, %d reset: want both, the budget ending in between", greeted, reset)
	}

	hc := &http.Client{Timeout: 20 * time.Second}
	resp, err := hc.Get("http://" + httpAddr + "/status")
	if err != nil {
		t.Fatalf("the child's HTTP server with its descriptors spent on connections: %v", err)
	}
	var st Status
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || st.FDExhausted < uint64(reset) {
		t.Errorf("status: fdExhausted %d (%v), want at least the %d resets", st.FDExhausted, err, reset)
	}

	stdin.Close() // the child shuts down
	err = cmd.Wait()
	exited = true
	if err != nil {
		t.Fatalf("child: %v\n%s", err, stderr.String())
	}
	logged := strings.Count(stderr.String(), "out of file descriptors")
	if logged == 0 || logged >= reset {
		t.Errorf("%d log lines for %d refusals, want a few (rate-limited):\n%s", logged, reset, stderr.String())
	}
}

// TestFDExhaustionChild is the child of TestFDExhaustion.
func TestFDExhaustionChild(t *testing.T) {
	backend := os.Getenv(fdChildEnv)
	if backend == "" {
		t.Skip("runs as the child process of TestFDExhaustion")
	}
	lim := syscall.Rlimit{Cur: 200, Max: 200}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	p := NewProxier(Config{Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	mustSync(t, p, snapshotOf(t, webSpec(service.Affinity{}, backend)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(p.Status())
	})}
	go srv.Serve(ln)
	fmt.Printf("proxy %s http %s\n", listenerAddr(t, p, "default/web:http"), ln.Addr())
	io.Copy(io.Discard, os.Stdin) // until the parent closes it
	srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	p.Shutdown(ctx)
}
