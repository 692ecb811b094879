package socklb

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/internal/netnstest"
)

// TestKernelAffinity: a Service with ClientIP affinity and three backends.
// From each of two network namespaces (two pods), 30 connects from inside
// the cgroup all reach one backend, the namespace's (the two may differ);
// the affinity map holds an entry keyed by each namespace's cookie and the
// Service's ID, naming that backend, and a Fake loaded with the kernel's
// Dump sends the namespace there too. Pointing a namespace's entry at
// another slot, fresh, moves its next connects there: the program follows
// the map.
func TestKernelAffinity(t *testing.T) {
	netnstest.RequireRoot(t)
	cg := newCgroup(t)
	k := newKernel(t, cg.path)
	ctx := context.Background()
	vip := netip.MustParseAddrPort("198.18.0.30:80")
	web := Service{VIP: vip.Addr(), Port: 80, Protocol: TCP}
	var e Entry
	names := []string{"198.19.0.1", "198.19.0.2", "198.19.0.3"}
	for _, b := range names {
		e.Backends = append(e.Backends, netip.AddrPortFrom(netip.MustParseAddr(b), 8080))
	}
	e.AffinityTimeout = 3 * time.Hour // Kubernetes' default, 10800 s
	must(t, k.SetService(ctx, web, e))
	id, _ := k.ids.lookup(web)

	for _, pod := range []string{"pod A", "pod B"} {
		ns := netnstest.New(t)
		for i, b := range e.Backends {
			addAddr(t, ns, b.Addr())
			serve(t, ns, b.String(), names[i])
		}
		got := countLines(dialFrom(t, ns, cg, vip.String(), 30))
		if len(got) != 1 {
			t.Fatalf("%s: 30 connects to %s reached %v, want one backend", pod, vip, got)
		}
		var reached string
		for b := range got {
			reached = b
		}
		t.Logf("%s: 30 connects, all to %s", pod, reached)

		key := affKey{NetnsCookie: netnsCookie(t, ns), ID: id}
		var val affValue
		if err := k.m.affinity.Lookup(&key, &val); err != nil {
			t.Fatalf("%s: affinity map[(netns cookie %d, id %d)]: %v", pod, key.NetnsCookie, id, err)
		}
		if b := e.Backends[val.Slot]; addrFrom16(val.Addr) != b.Addr() || b.Addr().String() != reached {
			t.Errorf("%s: affinity entry names slot %d, %s; connects reached %s", pod, val.Slot, addrFrom16(val.Addr), reached)
		}

		// A Fake loaded with the kernel's maps decides as the kernel did:
		// the entry wins over a random number that picks another slot.
		d, err := k.Dump(ctx)
		must(t, err)
		fake := NewFake()
		must(t, fake.Load(d))
		c := Client{NetnsCookie: key.NetnsCookie, Random: val.Slot + 1, Now: d.Now}
		if got, tr := fake.Connect(c, TCP, vip); got.Addr().String() != reached || !strings.Contains(tr.String(), "the same backend, taken") {
			t.Errorf("%s: a Fake loaded with the kernel's maps sends netns %d to %s, want %s by affinity\n%s\n%s", pod, key.NetnsCookie, got, reached, tr, d)
		}

		// Point the entry at the next slot, used now: the connects follow.
		next := (val.Slot + 1) % uint32(len(e.Backends))
		nb := encodeBackend(e.Backends[next])
		val = affValue{LastUsed: monotonicNow(t), Slot: next, Addr: nb.Addr, Port: nb.Port}
		must(t, k.m.affinity.Update(&key, &val, 0))
		if got := countLines(dialFrom(t, ns, cg, vip.String(), 10)); got[names[next]] != 10 {
			t.Errorf("%s: after the entry was pointed at slot %d (%s), 10 connects reached %v", pod, next, names[next], got)
		}
	}
}

// netnsCookie is what bpf_get_netns_cookie returns for sockets in ns: the
// SO_NETNS_COOKIE of a socket made there.
func netnsCookie(t *testing.T, ns *netnstest.NS) uint64 {
	t.Helper()
	var cookie uint64
	must(t, ns.Do(func() error {
		c, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer c.Close()
		raw, err := c.(*net.UDPConn).SyscallConn()
		if err != nil {
			return err
		}
		var serr error
		if err := raw.Control(func(fd uintptr) {
			cookie, serr = unix.GetsockoptUint64(int(fd), unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
		}); err != nil {
			return err
		}
		return serr
	}))
	return cookie
}

// monotonicNow is bpf_ktime_get_ns's clock, read from user space.
func monotonicNow(t *testing.T) uint64 {
	t.Helper()
	var ts unix.Timespec
	must(t, unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts))
	return uint64(ts.Nano())
}
