package socklb

import (
	"context"
	"math"
	"net/netip"
	"strings"
	"testing"
)

// svcN is Service 198.18.0.n:80/TCP.
func svcN(n byte) Service {
	return Service{netip.AddrFrom4([4]byte{198, 18, 0, n}), 80, TCP}
}

// TestIDAllocator: IDs in order from 1, a Service keeps its own, a released
// ID comes back only after the counter wraps (skipping 0 and held IDs).
func TestIDAllocator(t *testing.T) {
	a := newIDAllocator()
	for n, want := range []uint32{1, 2, 3} {
		if got := a.take(svcN(byte(n + 1))); got != want {
			t.Fatalf("take(%s) = %d, want %d", svcN(byte(n+1)), got, want)
		}
	}
	if got := a.take(svcN(2)); got != 2 {
		t.Errorf("take(%s) again = %d, want its own 2", svcN(2), got)
	}
	a.release(svcN(2))
	if id, ok := a.lookup(svcN(2)); ok {
		t.Errorf("after release, lookup(%s) = %d, want none", svcN(2), id)
	}
	if got := a.take(svcN(4)); got != 4 {
		t.Errorf("take(%s) after 2 was released = %d, want 4 (a freed ID is not reused at once)", svcN(4), got)
	}
	a.release(svcN(4)) // nothing else holds 4
	a.release(svcN(9)) // never had one: nothing happens

	// Near the end of the u32 range: the last ID, then round again past 0
	// and the held 1 to the freed 2.
	a.next = math.MaxUint32
	if got := a.take(svcN(5)); got != math.MaxUint32 {
		t.Errorf("take(%s) at the end = %d, want %d", svcN(5), got, uint32(math.MaxUint32))
	}
	if got := a.take(svcN(6)); got != 2 {
		t.Errorf("take(%s) after the wrap = %d, want 2 (0 is never an ID, 1 is held)", svcN(6), got)
	}
	if got := a.take(svcN(7)); got != 4 {
		t.Errorf("take(%s) = %d, want 4 (3 is held)", svcN(7), got)
	}
	for _, n := range []byte{1, 3, 5, 6, 7} {
		id, _ := a.lookup(svcN(n))
		if a.owner[id] != svcN(n) {
			t.Errorf("owner[%d] = %s, want %s", id, a.owner[id], svcN(n))
		}
	}
	if len(a.owner) != len(a.byService) || len(a.owner) != 5 {
		t.Errorf("%d IDs held by %d Services, want 5 and 5", len(a.owner), len(a.byService))
	}
}

// TestIDAllocatorAdopt: adopted IDs are held, the next new Service gets one
// past the highest, and an ID of 0 or held twice is an error naming both.
func TestIDAllocatorAdopt(t *testing.T) {
	a := newIDAllocator()
	for _, s := range []struct {
		n  byte
		id uint32
	}{{1, 7}, {2, 3}, {1, 7}} { // the same pair twice is no conflict
		if err := a.adopt(svcN(s.n), s.id); err != nil {
			t.Fatal(err)
		}
	}
	if got := a.take(svcN(3)); got != 8 {
		t.Errorf("take after adopting 7 and 3 = %d, want 8", got)
	}
	for _, tc := range []struct {
		svc  Service
		id   uint32
		want string
	}{
		{svcN(4), 0, "service 198.18.0.4:80/TCP: id: must not be 0"},
		{svcN(4), 3, "service 198.18.0.4:80/TCP: id 3: also 198.18.0.2:80/TCP's"},
		{svcN(1), 9, "service 198.18.0.1:80/TCP: id 9: it already has id 7"},
	} {
		if err := a.adopt(tc.svc, tc.id); err == nil || err.Error() != tc.want {
			t.Errorf("adopt(%s, %d) = %v, want %q", tc.svc, tc.id, err, tc.want)
		}
	}
}

// TestFakeIDsAfterLoad: a Fake loaded with a Dump numbers new Services past
// the highest loaded ID, as a Kernel adopting pinned maps does, and does not
// reuse a deleted Service's ID.
func TestFakeIDsAfterLoad(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	must(t, f.Load(Dump{Services: []DumpService{{Service: svcN(1), ID: 3}, {Service: svcN(2), ID: 10}}}))
	must(t, f.DeleteService(ctx, svcN(2)))
	must(t, f.SetService(ctx, svcN(3), Entry{}))
	must(t, f.SetService(ctx, svcN(4), Entry{}))
	d, err := f.Dump(ctx)
	must(t, err)
	got := map[Service]uint32{}
	for _, s := range d.Services {
		got[s.Service] = s.ID
	}
	want := map[Service]uint32{svcN(1): 3, svcN(3): 11, svcN(4): 12}
	if len(got) != len(want) {
		t.Fatalf("Dump holds %v, want %v", got, want)
	}
	for svc, id := range want {
		if got[svc] != id {
			t.Errorf("%s has id %d, want %d (all: %v)", svc, got[svc], id, got)
		}
	}
	if err := f.Load(Dump{Services: []DumpService{{Service: svcN(5), ID: 0}}}); err == nil || !strings.Contains(err.Error(), "dump: services[0]: service 198.18.0.5:80/TCP: id: must not be 0") {
		t.Errorf("Load with id 0 = %v, want an error naming services[0] and its id", err)
	}
}
