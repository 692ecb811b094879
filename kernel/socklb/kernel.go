package socklb

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// Config says where the programs attach and how big the maps are.
type Config struct {
	// CgroupPath is a cgroup v2 directory. The programs see the sockets of
	// every process in it and in its descendants, nobody else's.
	CgroupPath string

	// MaxServices is the services map's size (the backends map holds 16
	// times as many slots); 0 means 65536.
	MaxServices uint32

	// PinPath, when set, is a directory in a bpffs (mount -t bpf) the
	// caller mounted: New pins the maps and the programs' links there, or
	// adopts those a previous Kernel pinned, so the programs stay attached
	// and the maps filled while no process holds them: a restart does not
	// stop the translation (pin.go). Cleanup removes them. Empty: nothing
	// is pinned, and the programs detach when the Kernel is closed or the
	// process exits.
	PinPath string
}

// bpfMaps are the programs' maps.
type bpfMaps struct {
	services *ebpf.Map // svcKey -> svcValue
	backends *ebpf.Map // backendKey -> backendValue
	revnat   *ebpf.Map // revKey -> revValue, LRU
	affinity *ebpf.Map // affKey -> affValue, LRU
	counts   *ebpf.Map // service ID -> u64 per CPU (counter.go)
}

func (m *bpfMaps) close() error {
	var errs []error
	for _, mp := range []*ebpf.Map{m.services, m.backends, m.revnat, m.affinity, m.counts} {
		if mp != nil {
			errs = append(errs, mp.Close())
		}
	}
	return errors.Join(errs...)
}

// hook is one program: where it attaches and how it is built.
type hook struct {
	name   string
	attach ebpf.AttachType
	build  func(*bpfMaps) asm.Instructions
}

// hooks are the programs Kernel loads and attaches, in order: the forward
// translation first, so a socket's reverse entry exists before a reply can
// be received.
var hooks = []hook{
	{"connect4", ebpf.AttachCGroupInet4Connect, func(m *bpfMaps) asm.Instructions { return forwardProg(ipv4, m) }},
	{"connect6", ebpf.AttachCGroupInet6Connect, func(m *bpfMaps) asm.Instructions { return forwardProg(ipv6, m) }},
	{"sendmsg4", ebpf.AttachCGroupUDP4Sendmsg, func(m *bpfMaps) asm.Instructions { return forwardProg(ipv4, m) }},
	{"sendmsg6", ebpf.AttachCGroupUDP6Sendmsg, func(m *bpfMaps) asm.Instructions { return forwardProg(ipv6, m) }},
	{"recvmsg4", ebpf.AttachCGroupUDP4Recvmsg, func(m *bpfMaps) asm.Instructions { return reverseProg(ipv4, m) }},
	{"recvmsg6", ebpf.AttachCGroupUDP6Recvmsg, func(m *bpfMaps) asm.Instructions { return reverseProg(ipv6, m) }},
	{"getpeername4", ebpf.AttachCgroupInet4GetPeername, func(m *bpfMaps) asm.Instructions { return reverseProg(ipv4, m) }},
	{"getpeername6", ebpf.AttachCgroupInet6GetPeername, func(m *bpfMaps) asm.Instructions { return reverseProg(ipv6, m) }},
}

// Kernel is the real socket LB: the maps and the programs over them, loaded
// and attached to one cgroup. Close detaches them; the maps go with their
// last reference.
type Kernel struct {
	mu    sync.Mutex
	m     bpfMaps
	progs []*ebpf.Program
	links []link.Link
	ids   idAllocator // the services map's IDs (ids.go)
}

var _ Interface = (*Kernel)(nil)

// New creates the maps, loads the programs over them and attaches them to
// cfg.CgroupPath. The kernel's refusal comes back wrapped: errors.Is finds
// the errno (EPERM without CAP_BPF, for one), errors.As an *ebpf.VerifierError
// with the verifier's log when a program is refused.
func New(cfg Config) (_ *Kernel, err error) {
	if cfg.CgroupPath == "" {
		return nil, errors.New("socklb: config: CgroupPath: must not be empty")
	}
	if cfg.MaxServices == 0 {
		cfg.MaxServices = defaultMaxService
	}
	k := &Kernel{ids: newIDAllocator()}
	defer func() {
		if err != nil {
			k.Close()
		}
	}()
	svcSpec, beSpec, revSpec, affSpec := mapSpecs(cfg.MaxServices)
	for _, m := range []struct {
		spec *ebpf.MapSpec
		to   **ebpf.Map
	}{{svcSpec, &k.m.services}, {beSpec, &k.m.backends}, {revSpec, &k.m.revnat}, {affSpec, &k.m.affinity},
		{countsSpec(cfg.MaxServices), &k.m.counts}} {
		if *m.to, err = openMap(m.spec, cfg.PinPath); err != nil {
			return nil, err
		}
	}
	// Adopted maps come with their Services: learn their IDs.
	if err := k.readIDs(); err != nil {
		return nil, err
	}
	if err := k.adoptCounts(); err != nil {
		return nil, err
	}
	for _, h := range hooks {
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Name:         "svcp_" + h.name,
			Type:         ebpf.CGroupSockAddr,
			AttachType:   h.attach,
			Instructions: h.build(&k.m),
			License:      "Apache-2.0",
		})
		if err != nil {
			return nil, fmt.Errorf("socklb: load %s: %w", h.name, err)
		}
		k.progs = append(k.progs, prog)
		l, err := attach(cfg, h, prog)
		if err != nil {
			return nil, err
		}
		k.links = append(k.links, l)
	}
	return k, nil
}

// Close detaches the programs and releases the maps: connect() in the cgroup
// is no longer translated; sockets already connected keep their backend
// (they are plain sockets). With Config.PinPath, Close only lets go of them:
// the pinned links keep the programs attached, the pinned maps keep their
// elements, until the next Kernel adopts them or Cleanup removes them.
func (k *Kernel) Close() error {
	var errs []error
	for _, l := range k.links {
		errs = append(errs, l.Close())
	}
	for _, p := range k.progs {
		errs = append(errs, p.Close())
	}
	errs = append(errs, k.m.close())
	return errors.Join(errs...)
}

// SetService implements Interface: the backend slots first, then the
// service element (whose count makes them visible), then the slots past the
// new count, which no connect() can pick any more.
func (k *Kernel) SetService(_ context.Context, svc Service, e Entry) error {
	if err := validate(svc, &e); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	key := encodeSvcKey(svc)
	var old svcValue
	oldCount := uint32(0)
	// A Service keeps its ID while it exists, also when a write below
	// fails: a retry then rewrites the same slots.
	if _, ok := k.ids.lookup(svc); ok {
		if err := k.m.services.Lookup(&key, &old); err == nil {
			oldCount = old.Count
		}
	} else {
		// A new ID: its counter starts at zero, also when another Service
		// held the ID before. Should that fail, the Service gets no ID, so
		// a retry starts over rather than go on without a counter.
		if err := k.resetCount(svc, k.ids.take(svc)); err != nil {
			k.ids.release(svc)
			return err
		}
	}
	id := k.ids.take(svc)
	for slot, b := range e.Backends {
		bk, bv := backendKey{ID: id, Slot: uint32(slot)}, encodeBackend(b)
		if err := k.m.backends.Update(&bk, &bv, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("service %s: backends[%d] %s: update backends map: %w", svc, slot, b, err)
		}
	}
	val := encodeSvcValue(id, e)
	if err := k.m.services.Update(&key, &val, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("service %s: update services map: %w", svc, err)
	}
	return k.deleteSlots(svc, id, uint32(len(e.Backends)), oldCount)
}

// deleteSlots deletes the backends map's slots from..to-1 of Service id.
func (k *Kernel) deleteSlots(svc Service, id, from, to uint32) error {
	for slot := from; slot < to; slot++ {
		bk := backendKey{ID: id, Slot: slot}
		if err := k.m.backends.Delete(&bk); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("service %s: delete slot %d from backends map: %w", svc, slot, err)
		}
	}
	return nil
}

// DeleteService implements Interface: the service element first, so no
// connect() finds the slots deleted after it.
func (k *Kernel) DeleteService(_ context.Context, svc Service) error {
	if err := validate(svc, nil); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	key := encodeSvcKey(svc)
	var old svcValue
	if err := k.m.services.Lookup(&key, &old); errors.Is(err, ebpf.ErrKeyNotExist) {
		k.ids.release(svc)
		return nil
	} else if err != nil {
		return fmt.Errorf("service %s: look up services map: %w", svc, err)
	}
	if err := k.m.services.Delete(&key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("service %s: delete from services map: %w", svc, err)
	}
	k.ids.release(svc)
	return errors.Join(k.deleteSlots(svc, old.ID, 0, old.Count), k.deleteCount(svc, old.ID))
}

// Services implements Interface, reading the maps back.
func (k *Kernel) Services(_ context.Context) (map[Service]Entry, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make(map[Service]Entry)
	var key svcKey
	var val svcValue
	it := k.m.services.Iterate()
	for it.Next(&key, &val) {
		svc := decodeSvcKey(key)
		e := Entry{AffinityTimeout: val.affinity()}
		for slot := range val.Count {
			var bv backendValue
			if err := k.m.backends.Lookup(&backendKey{ID: val.ID, Slot: slot}, &bv); err != nil {
				return nil, fmt.Errorf("service %s: slot %d: read backends map: %w", svc, slot, err)
			}
			e.Backends = append(e.Backends, decodeBackend(bv))
		}
		out[svc] = e
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("socklb: read services map: %w", err)
	}
	return out, nil
}
