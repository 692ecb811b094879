package topology

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// State is what one svclab command leaves for the next, in the state
// directory's state.json: what the lab runs and how.
type State struct {
	Mode string `json:"mode"`
	// Kubectl is set when the lab runs a control plane: svcproxy and
	// clusterdns then watch its API server (--kubeconfig) instead of the
	// manifests file.
	Kubectl string `json:"kubectl,omitempty"`
	// RealNode is set when a real kubelet runs the lab's pods (svclab up
	// --kubelet): svcproxy and clusterdns are its pods.
	RealNode bool `json:"realNode,omitempty"`
	// Nodes is the number of nodes of the cluster kubeadm made (svclab up
	// --nodes N), 0 for none: the control plane is kubeadm's, and
	// kube-proxy and CoreDNS (or svcproxy and clusterdns) run as its pods.
	Nodes int `json:"nodes,omitempty"`
	// Demo is the pid of a `svclab demo` that owns the lab, 0 for none.
	Demo int `json:"demo,omitempty"`
	// IPVSScheduler is svcproxy's --ipvs-scheduler, "" for its default (rr).
	IPVSScheduler string `json:"ipvsScheduler,omitempty"`
	// Offload is hybrid's --offload, "" for its default (nftables).
	Offload string `json:"offload,omitempty"`
	// DemoteAfter is hybrid's --demote-after, "" for its default (5m).
	DemoteAfter string `json:"demoteAfter,omitempty"`
}

func (n *Net) statePath() string { return filepath.Join(n.cfg.StateDir, "state.json") }

// ReadState reads the State the last svclab command wrote; an error says
// to bring the lab up when there is none.
func (n *Net) ReadState() (State, error) {
	var s State
	b, err := os.ReadFile(n.statePath())
	if errors.Is(err, os.ErrNotExist) {
		return s, fmt.Errorf("the lab is not up (no %s): run `svclab up` first", n.statePath())
	}
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("%s: %w", n.statePath(), err)
	}
	return s, nil
}

// WriteState writes s for the next svclab command.
func (n *Net) WriteState(s State) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(n.statePath(), append(b, '\n'), 0o644)
}

// Mode is the mode svcproxy was last started in.
func (n *Net) Mode() (string, error) {
	s, err := n.ReadState()
	return s.Mode, err
}
