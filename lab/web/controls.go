package web

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/svcproxy/svcproxy/lab/cluster"
	"github.com/svcproxy/svcproxy/lab/pods"
	"github.com/svcproxy/svcproxy/lab/topology"
)

// Runner runs svclab with args (as `svclab ARGS...` would on a terminal)
// and returns what it printed. cmd/svclab runs its own binary; tests record
// the arguments.
type Runner func(ctx context.Context, args []string) (output string, err error)

// Control is what a control of the page asks for (POST /api/run): one
// action and its fields.
type Control struct {
	// Action is "traffic", "pod" or "mode".
	Action string `json:"action"`
	// traffic: Target (a Service name: "web", "udp://echo"), N requests,
	// Rate per second (0: each once the last is answered), From a lab host.
	Target string  `json:"target,omitempty"`
	N      int     `json:"n,omitempty"`
	Rate   float64 `json:"rate,omitempty"`
	From   string  `json:"from,omitempty"`
	// pod: Pod and Change: "kill", "start", "ready=false", "ready=true",
	// "terminating".
	Pod    string `json:"pod,omitempty"`
	Change string `json:"change,omitempty"`
	// mode: Mode, one of svcproxy's modes.
	Mode string `json:"mode,omitempty"`
}

// Command is one command a control ran, as the page lists it.
type Command struct {
	ID      int    `json:"id"`
	Command string `json:"command"` // "svclab traffic --n 200 --rate 40 web"
	// Queued says the command waits for its turn: the controls run one at
	// a time. After is the command it waits for.
	Queued  bool      `json:"queued"`
	After   int       `json:"after,omitempty"`
	Started time.Time `json:"started"` // zero while queued
	Running bool      `json:"running"`
	Output  string    `json:"output"`
	Error   string    `json:"error,omitempty"`
}

// Limits of the controls: the page drives a lab on this machine, and a
// typo should not send a million requests.
const (
	maxRequests = 5000
	maxRate     = 500
)

// podChanges are `svclab pod`'s changes, without their "--".
var podChanges = []string{"kill", "start", "ready=false", "ready=true", "terminating"}

// args checks c against the lab's hosts and returns the arguments of the
// svclab command that does it. Bad input is an error naming the field.
func (c Control) args(hosts []topology.HostRow) ([]string, error) {
	isHost := func(name string, role topology.Role) bool {
		return slices.ContainsFunc(hosts, func(h topology.HostRow) bool { return h.Name == name && (role == "" || h.Role == role) })
	}
	switch c.Action {
	case "traffic":
		if c.Target == "" {
			return nil, fmt.Errorf("traffic: target: empty (want a Service: web, udp://echo, 198.18.0.20:80)")
		}
		if _, err := pods.ParseTarget(c.Target); err != nil {
			return nil, fmt.Errorf("traffic: target %q: %w", c.Target, err)
		}
		if c.N < 1 || c.N > maxRequests {
			return nil, fmt.Errorf("traffic: n %d: want 1 to %d requests", c.N, maxRequests)
		}
		if c.Rate < 0 || c.Rate > maxRate {
			return nil, fmt.Errorf("traffic: rate %g: want 0 (as fast as answered) to %d per second", c.Rate, maxRate)
		}
		args := []string{"traffic", "--n", strconv.Itoa(c.N)}
		if c.Rate > 0 {
			args = append(args, "--rate", strconv.FormatFloat(c.Rate, 'f', -1, 64))
		}
		if c.From != "" && c.From != "client" {
			if !isHost(c.From, "") {
				return nil, fmt.Errorf("traffic: from %q: no such lab host", c.From)
			}
			args = append(args, "--from", c.From)
		}
		return append(args, c.Target), nil
	case "pod":
		if !isHost(c.Pod, topology.RolePod) {
			return nil, fmt.Errorf("pod: pod %q: no such pod in the lab", c.Pod)
		}
		if !slices.Contains(podChanges, c.Change) {
			return nil, fmt.Errorf("pod %s: change %q: want one of %s", c.Pod, c.Change, strings.Join(podChanges, ", "))
		}
		return []string{"pod", c.Pod, "--" + c.Change}, nil
	case "mode":
		if !slices.Contains(cluster.Modes, c.Mode) {
			return nil, fmt.Errorf("mode: mode %q: want one of %s", c.Mode, strings.Join(cluster.Modes, ", "))
		}
		return []string{"mode", c.Mode}, nil
	default:
		return nil, fmt.Errorf("action %q: want traffic, pod or mode", c.Action)
	}
}
