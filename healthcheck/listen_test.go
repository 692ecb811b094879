package healthcheck

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func hello(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello") }

// TestServeEndpointsRetries holds the address busy: without HardFail the
// server keeps trying, as kube-proxy's serveHealthz does, and serves once
// the address is free; with HardFail the error names the address.
func TestServeEndpointsRetries(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := busy.Addr().String()

	err = ServeEndpoints(context.Background(), []Endpoint{{Addr: addr, Handler: http.HandlerFunc(hello)}}, ServeOptions{HardFail: true})
	if err == nil || !strings.Contains(err.Error(), addr) {
		t.Fatalf("HardFail on a busy address: %v, want an error naming %s", err, addr)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- ServeEndpoints(ctx, []Endpoint{{Addr: addr, Handler: http.HandlerFunc(hello)}, {Addr: "0"}},
			ServeOptions{RetryEvery: 20 * time.Millisecond})
	}()
	time.Sleep(100 * time.Millisecond) // a few retries fail while busy
	busy.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != "hello" {
				t.Fatalf("answer %q, want hello", b)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never served %s once it was free: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("ServeEndpoints after ctx ended: %v", err)
	}
	if _, err := http.Get("http://" + addr + "/"); err == nil {
		t.Errorf("%s still serves after ServeEndpoints returned", addr)
	}
}
