package userspace

import (
	"fmt"

	"github.com/svcproxy/svcproxy/service"
)

// The localhost NodePorts of nftables mode (Config.LocalhostNodePorts): the
// same Proxier, its listeners on the node's loopback address, one per TCP
// node port that has an endpoint to send to.

// servedOnLocalhost is served for Config.LocalhostNodePorts: the TCP node
// ports. A UDP or SCTP node port is not served on loopback; nftables mode
// rejects and counts its packets there, as kube-proxy's table does.
func servedOnLocalhost(port *service.Port) (ok bool, why string) {
	switch {
	case port.NodePort == 0:
		return false, ""
	case port.Protocol != service.TCP:
		return false, fmt.Sprintf("protocol %s: localhost NodePorts are TCP only (the nftables table rejects and counts the rest)", port.Protocol)
	}
	return true, ""
}

// hasEndpoints reports whether sp's external traffic has an endpoint to go
// to: one on this node for externalTrafficPolicy Local, any usable one
// otherwise (the Balancers hold them once setEndpoints has run; pickFrom for
// the localhost listeners).
func (p *Proxier) hasEndpoints(sp *servicePort) bool {
	if sp.externalLocal.Load() {
		return len(p.local.Endpoints(sp.name)) > 0
	}
	return len(p.balancer.Endpoints(sp.name)) > 0
}

// ListenFailures counts the listeners that could not be bound (a port taken
// by another socket, a range exhausted), each retry again: kube-proxy's
// localhost listener creation failures.
func (p *Proxier) ListenFailures() uint64 { return p.bindFails.Load() }
