package socklb

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Config says where the program attaches.
type Config struct {
	// CgroupPath is a cgroup v2 directory. The program sees the sockets of
	// every process in it and in its descendants, nobody else's.
	CgroupPath string

	// MaxServices is the services map's size; 0 means 65536.
	MaxServices uint32
}

// Kernel is the real socket LB: a services hash map and the connect4 program,
// loaded and attached to one cgroup. Close detaches it; the map and program
// go with their last reference (nothing is pinned in this step).
type Kernel struct {
	services *ebpf.Map
	prog     *ebpf.Program
	link     link.Link
}

var _ Interface = (*Kernel)(nil)

// New creates the map, loads connect4 over it and attaches it to
// cfg.CgroupPath. The kernel's refusal comes back wrapped: errors.Is finds
// the errno (EPERM without CAP_BPF, for one), errors.As an *ebpf.VerifierError
// with the verifier's log when the program is refused.
func New(cfg Config) (*Kernel, error) {
	if cfg.CgroupPath == "" {
		return nil, errors.New("socklb: config: CgroupPath: must not be empty")
	}
	if cfg.MaxServices == 0 {
		cfg.MaxServices = 65536
	}
	services, err := ebpf.NewMap(&ebpf.MapSpec{
		Name:       "svcp_services",
		Type:       ebpf.Hash,
		KeySize:    keySize,
		ValueSize:  valueSize,
		MaxEntries: cfg.MaxServices,
	})
	if err != nil {
		return nil, fmt.Errorf("socklb: create services map: %w", err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "svcp_connect4",
		Type:         ebpf.CGroupSockAddr,
		AttachType:   ebpf.AttachCGroupInet4Connect,
		Instructions: connect4(services),
		License:      "Apache-2.0",
	})
	if err != nil {
		services.Close()
		return nil, fmt.Errorf("socklb: load connect4: %w", err)
	}
	l, err := link.AttachCgroup(link.CgroupOptions{
		Path:    cfg.CgroupPath,
		Attach:  ebpf.AttachCGroupInet4Connect,
		Program: prog,
	})
	if err != nil {
		prog.Close()
		services.Close()
		return nil, fmt.Errorf("socklb: attach connect4 to %s: %w", cfg.CgroupPath, err)
	}
	return &Kernel{services: services, prog: prog, link: l}, nil
}

// Close detaches the program and releases the map: connect() in the cgroup is
// no longer translated; sockets already connected keep their backend (they
// are plain sockets).
func (k *Kernel) Close() error {
	return errors.Join(k.link.Close(), k.prog.Close(), k.services.Close())
}

// SetService implements Interface.
func (k *Kernel) SetService(_ context.Context, svc Service, backend netip.AddrPort) error {
	if err := validate(svc, &backend); err != nil {
		return err
	}
	key, val := encodeKey(svc), encodeValue(backend)
	if err := k.services.Update(&key, &val, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("service %s: update services map: %w", svc, err)
	}
	return nil
}

// DeleteService implements Interface.
func (k *Kernel) DeleteService(_ context.Context, svc Service) error {
	if err := validate(svc, nil); err != nil {
		return err
	}
	key := encodeKey(svc)
	if err := k.services.Delete(&key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("service %s: delete from services map: %w", svc, err)
	}
	return nil
}

// Services implements Interface.
func (k *Kernel) Services(_ context.Context) (map[Service]netip.AddrPort, error) {
	out := make(map[Service]netip.AddrPort)
	var key mapKey
	var val mapValue
	it := k.services.Iterate()
	for it.Next(&key, &val) {
		out[decodeKey(key)] = decodeValue(val)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("socklb: read services map: %w", err)
	}
	return out, nil
}
