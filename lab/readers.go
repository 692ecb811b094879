package lab

import (
	"context"
	"path/filepath"

	"github.com/svcproxy/svcproxy/internal/nsenter"
	kipvs "github.com/svcproxy/svcproxy/kernel/ipvs"
	"github.com/svcproxy/svcproxy/lab/topology"
)

// What `svclab check` reads beyond the Services (lab/exercise's IPVSLab).

// IPVS calls read with the node's IPVS, read with kernel/ipvs (netlink, as
// ipvsadm reads it) from a thread in the node's network namespace.
func (l *Lab) IPVS(ctx context.Context, read func(kipvs.Interface) error) error {
	return nsenter.Run(filepath.Join(topology.NetnsDir, l.net.NodeNamespace()), func() error {
		k, err := kipvs.New()
		if err != nil {
			return err
		}
		defer k.Close()
		return read(k)
	})
}
