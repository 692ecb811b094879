package topology

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Start runs argv in host's namespace (and cgroup, see Cgroups.Place) in the
// background, in a session of its own so it outlives this command, with
// output to the state directory's NAME.log and its pid in NAME.pid. With
// withReady, the child gets the write end of a pipe as fd 3, to write a line
// to once it serves, and Start returns the read end. Host "" is the
// machine's own namespaces (the control-plane lab's kubelet).
func (n *Net) Start(name, host string, argv []string, withReady bool) (*exec.Cmd, *os.File, error) {
	logf, err := os.OpenFile(n.LogPath(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	defer logf.Close()
	ns := "the machine's namespace"
	cmd := exec.Command(argv[0], argv[1:]...)
	if host != "" {
		ns = n.cfg.Plan.Namespace(host)
		cmd = exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if h, ok := n.Host(host); ok {
		// A pod's server, say, is born in the pod's cgroup (cgroup.go).
		release, err := n.cgroups.Place(cmd, h)
		if err != nil {
			return nil, nil, err
		}
		defer release()
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	var readyR, readyW *os.File
	if withReady {
		if readyR, readyW, err = os.Pipe(); err != nil {
			return nil, nil, err
		}
		cmd.ExtraFiles = []*os.File{readyW}
	}
	err = cmd.Start()
	if readyW != nil {
		readyW.Close() // the child has its own copy now
	}
	if err != nil {
		if readyR != nil {
			readyR.Close()
		}
		return nil, nil, fmt.Errorf("start %s in %s: %w", name, ns, err)
	}
	n.mu.Lock()
	n.children = append(n.children, cmd)
	n.mu.Unlock()
	// `ip netns exec` execs the command, so this pid is the command's own.
	if err := os.WriteFile(n.PidPath(name), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		return nil, nil, err
	}
	return cmd, readyR, nil
}

// Reap collects the exit status of the processes this process started and
// that have ended, so none stays a zombie while the demo runs on.
func (n *Net) Reap() {
	n.mu.Lock()
	defer n.mu.Unlock()
	var keep []*exec.Cmd
	for _, c := range n.children {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(c.Process.Pid, &ws, syscall.WNOHANG, nil)
		if pid == 0 && err == nil {
			keep = append(keep, c) // still running
		}
	}
	n.children = keep
}

// LogPath is where Start writes the output of process name.
func (n *Net) LogPath(name string) string { return filepath.Join(n.cfg.StateDir, name+".log") }

// PidPath is where Start writes the pid of process name.
func (n *Net) PidPath(name string) string { return filepath.Join(n.cfg.StateDir, name+".pid") }

// ReadPid returns the pid of the lab process name, if it still runs in host
// ("": in the machine's namespaces, with the state directory on its command line).
func (n *Net) ReadPid(name, host string) (int, bool) {
	b, err := os.ReadFile(n.PidPath(name))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, false
	}
	// The pid may have been reused since: trust it only if it lives in our
	// namespace, or names our state directory.
	if host == "" {
		cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		return pid, err == nil && Alive(pid) && strings.Contains(string(cmdline), n.cfg.StateDir)
	}
	return pid, InNamespace(pid, n.cfg.Plan.Namespace(host))
}

// LogTail is the end of a process's log, for error messages.
func (n *Net) LogTail(name string) string {
	f, err := os.Open(n.LogPath(name))
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 10 {
			lines = lines[1:]
		}
	}
	if len(lines) == 0 {
		return ""
	}
	return "\n" + name + " log (" + n.LogPath(name) + "):\n  " + strings.Join(lines, "\n  ")
}

// Wait tries check until it succeeds, process pid (started as name)
// exits, or timeout passes; then the error ends with the end of its log.
// Between tries it waits up to every for the process's exit, so a crash is
// seen at once.
func (n *Net) Wait(ctx context.Context, name string, pid int, timeout, every time.Duration, check func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not ready after %s: %w%s", name, timeout, err, n.LogTail(name))
		}
		if WaitExit(pid, every) {
			return fmt.Errorf("%s: exited while starting%s", name, n.LogTail(name))
		}
	}
}

// ReadyTimeout bounds how long a lab process may take to start serving
// (times the slowdown, Patient).
const ReadyTimeout = 30 * time.Second
