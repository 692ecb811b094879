package pods

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/svcproxy/svcproxy/lab/topology"
)

// Config says what a Runner runs and where it writes.
type Config struct {
	// Net is the lab the pods are hosts of.
	Net *topology.Net
	// Self is the svclab binary that pods run as `svclab pod` and that sends
	// traffic as `svclab probe`.
	Self string
	// Stdout gets Traffic's tables and charts.
	Stdout io.Writer
	// Progress draws a live progress bar during traffic (for terminals).
	Progress bool
}

// Runner starts the pods' servers and sends them traffic from the lab's
// hosts.
type Runner struct {
	net      *topology.Net
	self     string
	stdout   io.Writer
	progress bool
}

// New returns the Runner of cfg.
func New(cfg Config) *Runner {
	return &Runner{net: cfg.Net, self: cfg.Self, stdout: cfg.Stdout, progress: cfg.Progress}
}

// server is the name of host's server among the lab's processes (its pid
// file, its log).
func server(host string) string { return "pod-" + host }

// StartServer starts `svclab pod` in h's namespace, on h's ports, and waits
// for its ready line.
func (r *Runner) StartServer(ctx context.Context, h topology.Host) error {
	name := server(h.Name)
	argv := []string{r.self, "pod", "--name", h.Name, "--ready-fd", "3"}
	if len(h.TCP) > 0 {
		argv = append(argv, "--tcp", joinPorts(h.TCP))
	}
	if len(h.UDP) > 0 {
		argv = append(argv, "--udp", joinPorts(h.UDP))
	}
	_, ready, err := r.net.Start(name, h.Name, argv, true)
	if err != nil {
		return err
	}
	defer ready.Close()
	_ = ready.SetReadDeadline(time.Now().Add(topology.Patient(topology.ReadyTimeout)))
	// The child writes one line once its ports are bound; EOF means it died.
	line, err := bufio.NewReader(ready).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		return fmt.Errorf("pod %s: did not become ready: %v%s", h.Name, err, r.net.LogTail(name))
	}
	return nil
}

func joinPorts(ps []uint16) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = fmt.Sprint(p)
	}
	return strings.Join(s, ",")
}

// StopServer stops host's server, if it runs, and forgets its pid: the
// pod is going away (the control-plane lab's kubelet deleting it).
func (r *Runner) StopServer(host string) error {
	if pid, ok := r.net.ReadPid(server(host), host); ok {
		if err := topology.StopPids([]int{pid}, 5*time.Second); err != nil {
			return err
		}
		r.net.Reap()
	}
	os.Remove(r.net.PidPath(server(host)))
	return nil
}

// Kill stops pod name's server, as a container that crashed: the
// namespace stays, nothing listens any more, and the pod stays in its
// EndpointSlices (nobody probes it), so new connections sent to it are
// refused.
func (r *Runner) Kill(ctx context.Context, name string) error {
	h, ok := r.net.Host(name)
	if !ok || h.Role != topology.RolePod {
		return fmt.Errorf("pod %q: no such pod", name)
	}
	pid, ok := r.net.ReadPid(server(name), name)
	if !ok {
		return fmt.Errorf("pod %s: its server is not running (svclab pod %s --start starts it)", name, name)
	}
	if err := topology.StopPids([]int{pid}, 5*time.Second); err != nil {
		return fmt.Errorf("pod %s: %w", name, err)
	}
	r.net.Reap()
	return nil
}

// Restart starts pod name's server again after Kill.
func (r *Runner) Restart(ctx context.Context, name string) error {
	h, ok := r.net.Host(name)
	if !ok || h.Role != topology.RolePod {
		return fmt.Errorf("pod %q: no such pod", name)
	}
	if _, ok := r.net.ReadPid(server(name), name); ok {
		return fmt.Errorf("pod %s: its server is running already", name)
	}
	if err := r.net.CheckUp(name); err != nil {
		return err
	}
	return r.StartServer(ctx, h)
}
