package main

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestReloadAnswersEveryQuery sends queries over UDP and TCP, each from a
// new socket, and asks /ready, all the while the Corefile is reloaded
// three times: every query gets its answer and /ready stays OK. A reload
// hands the running sockets to the new instance, as CoreDNS's does, so no
// query waits in a socket that is about to close.
func TestReloadAnswersEveryQuery(t *testing.T) {
	p := freePorts(t)
	services := writeServices(t, t.TempDir())
	good := kubeadmCorefile(t, p, fakeResolver(t))
	cm := newConfigMapDir(t, good)
	d := startCorefile(t, p, cm.path(), "--services", services)

	var (
		mu       sync.Mutex
		sent     = map[string]int{}
		failures []string
		ttls     = map[uint32]bool{}
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(failures) < 10 {
			failures = append(failures, fmt.Sprintf(format, args...))
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, proto := range []string{"udp", "udp", "udp", "tcp"} {
		wg.Go(func() {
			// A new client socket each time: the kernel may hand each
			// query to another of the listening sockets.
			c := &dns.Client{Net: proto, Timeout: 5 * time.Second}
			addr := fmt.Sprintf("127.0.0.1:%d", p.dns)
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, _, err := c.Exchange(new(dns.Msg).SetQuestion("web.default.svc.cluster.local.", dns.TypeA), addr)
				mu.Lock()
				sent[proto]++
				if err == nil && len(resp.Answer) == 1 {
					ttls[resp.Answer[0].Header().Ttl] = true
				}
				mu.Unlock()
				if err != nil || len(resp.Answer) != 1 {
					fail("%s: %v %v", proto, resp, err)
				}
			}
		})
	}
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			body, code, err := get(p.ready, "/ready")
			mu.Lock()
			sent["/ready"]++
			mu.Unlock()
			if err != nil || code != 200 || body != "OK" {
				fail("/ready: %d %q %v", code, body, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})

	for _, ttl := range []uint32{7, 8, 9} {
		cm.update(t, strings.Replace(good, "ttl 30", fmt.Sprintf("ttl %d", ttl), 1))
		deadline := time.Now().Add(15 * time.Second) // reload 2s, jitter up to ±0.5s
		for {
			resp := d.ask(t, "web.default.svc.cluster.local.", dns.TypeA)
			if len(resp.Answer) == 1 && resp.Answer[0].Header().Ttl == ttl {
				break
			}
			if time.Now().After(deadline) {
				close(stop)
				wg.Wait()
				t.Fatalf("ttl %d not served within 15s\n%s", ttl, d.logs)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	close(stop)
	wg.Wait()
	for _, ttl := range []uint32{30, 7, 8, 9} {
		if !ttls[ttl] {
			t.Errorf("the clients never saw ttl %d: they did not span every reload", ttl)
		}
	}
	for _, f := range failures {
		t.Error(f)
	}
	t.Logf("across 3 reloads: %v queries and requests, TTLs seen %v", sent, ttls)
}
