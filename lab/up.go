package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/svcproxy/svcproxy/lab/topology"
)

// errRealNodeSocketLB refuses --mode socklb on the real node, whose pods are
// started by containerd, not born in the lab's subtree.
var errRealNodeSocketLB = errors.New("mode socklb: not on the real node: its pods' processes are in the kubelet's cgroups, not in the lab's cgroup2 subtree, and svcproxy's DaemonSet mounts no cgroup2 to attach to")

// UpOptions say what `svclab up` builds.
type UpOptions struct {
	// Mode is svcproxy's --mode.
	Mode string
	// ControlPlane, when not nil, runs etcd, kube-apiserver and
	// kube-controller-manager in the node, and svcproxy and clusterdns watch
	// that API server; nil is the file-fed lab, where they read the manifests
	// file.
	ControlPlane *ControlPlane
	// RealNode, with ControlPlane, runs a real node beside it: containerd,
	// the kubelet and kube-scheduler, with svcproxy and clusterdns as pods
	// of deploy/realnode (their image's), instead of svclab's processes.
	RealNode *RealNode
}

// Up builds the file-fed lab with svcproxy in mode; see UpWith.
func (l *Lab) Up(ctx context.Context, mode string) error {
	return l.UpWith(ctx, UpOptions{Mode: mode})
}

// UpWith builds the lab: it removes what a crashed run left behind, makes
// the lab's cgroup2 subtree (topology/cgroup.go), creates the namespaces and links of
// the Plan, writes the pods' resolv.conf, starts a Pod server in each pod (in
// the pod's cgroup), then clusterdns and svcproxy in the node, and returns
// once each answers. With a control plane, the pods are the
// StatefulSets' of cluster.yaml, which the lab's kubelet starts (see
// upControlPlane).
func (l *Lab) UpWith(ctx context.Context, opts UpOptions) error {
	mode := opts.Mode
	if err := checkMode(mode); err != nil {
		return err
	}
	if s, err := l.readState(); err == nil && s.Demo != 0 && s.Demo != os.Getpid() && topology.Alive(s.Demo) {
		return fmt.Errorf("svclab demo (pid %d) is using the lab; wait for it to end", s.Demo)
	}
	if opts.RealNode != nil {
		return l.upWithRealNode(ctx, opts)
	}
	proxy, err := l.binary("svcproxy")
	if err != nil {
		return err
	}
	dns, err := l.binary("clusterdns")
	if err != nil {
		return err
	}
	if err := l.Down(ctx); err != nil {
		return fmt.Errorf("remove the leftovers of an earlier lab: %w", err)
	}
	if err := os.MkdirAll(l.cfg.StateDir, 0o755); err != nil {
		return err
	}
	if err := l.cg.MakeSubtree(); err != nil {
		return err
	}
	if err := l.mountBPFFS(); err != nil {
		return err
	}
	st := state{Mode: mode}
	if l.inDemo {
		st.Demo = os.Getpid()
	}
	if opts.ControlPlane != nil {
		st.Kubectl = opts.ControlPlane.Kubectl
		if err := l.writeState(st); err != nil {
			return err
		}
		return l.upControlPlane(ctx, *opts.ControlPlane, dns, proxy, mode)
	}
	if err := os.WriteFile(l.ManifestsPath(), l.cfg.Manifests, 0o644); err != nil {
		return err
	}
	if err := l.writeState(st); err != nil {
		return err
	}
	p := l.cfg.Plan
	for _, argv := range p.Commands() {
		if err := topology.Run(ctx, argv...); err != nil {
			return err
		}
	}
	for _, h := range p.Hosts {
		if err := l.writeResolvConf(h); err != nil {
			return err
		}
	}
	for _, h := range p.Pods() {
		if err := l.startPod(ctx, h); err != nil {
			return err
		}
	}
	if err := l.startDNS(ctx, dns); err != nil {
		return err
	}
	return l.startProxy(ctx, proxy, mode)
}

// upWithRealNode is UpWith for the real-node lab: svcproxy runs as the
// DaemonSet's pod, in the mode of deploy/realnode's ConfigMap.
func (l *Lab) upWithRealNode(ctx context.Context, opts UpOptions) error {
	if opts.Mode == "socklb" {
		return errRealNodeSocketLB
	}
	if opts.ControlPlane == nil {
		return errors.New("a real node needs the control plane (its programs: make kapi)")
	}
	if err := l.Down(ctx); err != nil {
		return fmt.Errorf("remove the leftovers of an earlier lab: %w", err)
	}
	if err := os.MkdirAll(l.cfg.StateDir, 0o755); err != nil {
		return err
	}
	if err := l.cg.MakeSubtree(); err != nil {
		return err
	}
	st := state{Mode: opts.Mode, Kubectl: opts.ControlPlane.Kubectl, RealNode: true}
	if err := l.writeState(st); err != nil {
		return err
	}
	return l.upRealNode(ctx, *opts.ControlPlane, *opts.RealNode, opts.Mode)
}

// writeResolvConf writes the resolv.conf that `ip netns exec` mounts in h.
func (l *Lab) writeResolvConf(h topology.Host) error {
	p := l.cfg.Plan
	dir := filepath.Join(topology.EtcNetnsDir, p.Namespace(h.Name))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	conf := p.ResolvConf()
	if h.Role == topology.RoleOutside {
		conf = p.OutsideResolvConf()
	}
	return os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte(conf), 0o644)
}

func validMode(m string) bool {
	for _, v := range Modes {
		if m == v {
			return true
		}
	}
	return false
}

// Down removes everything the lab made: the processes in its namespaces and
// in its cgroups (the pods' cgroup2 subtree; the real node's containerd, its
// pods and its mount namespace), the cgroup directories, the namespaces (and
// with them their links, routes and rules), their /etc/netns files and the
// state directory. It is safe to run when nothing is up, and it finds what a
// crashed `svclab up` left: everything has a fixed name.
func (l *Lab) Down(ctx context.Context) error {
	// The control-plane lab's kubelet first: it would make pods' namespaces
	// while the others are removed.
	if pid, ok := l.readPid("kubelet", ""); ok {
		if err := topology.StopPids([]int{pid}, 5*time.Second); err != nil {
			return err
		}
	}
	// The real node's containerd and pods, which are not all in the lab's
	// network namespaces; then its mount namespace.
	if err := l.downRealNode(); err != nil {
		return err
	}
	nss, err := topology.Namespaces(l.cfg.Plan.Prefix)
	if err != nil {
		return err
	}
	var pids []int
	for _, ns := range nss {
		ps, err := topology.NSPids(ns)
		if err != nil {
			return err
		}
		pids = append(pids, ps...)
	}
	var errs []error
	if err := topology.StopPids(pids, 5*time.Second); err != nil {
		errs = append(errs, err)
	}
	l.reap()
	// svcproxy is stopped: nothing adopts the socket LB's pins any more.
	if err := l.unmountBPFFS(); err != nil {
		errs = append(errs, err)
	}
	for _, ns := range nss {
		if err := topology.Run(ctx, "ip", "netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	etc, _ := filepath.Glob(filepath.Join(topology.EtcNetnsDir, l.cfg.Plan.Prefix+"*"))
	for _, dir := range etc {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(l.cfg.StateDir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Leftovers lists what the lab left on the machine: namespaces, their mounts
// (a private cgroup2 mount too), /etc/netns directories, the lab's cgroup
// directories (its cgroup2 subtree, the real node's) and their processes,
// the state directory, and processes whose command line names the state
// directory or the namespace prefix. Empty after Down.
func (l *Lab) Leftovers() []string {
	var out []string
	prefix := l.cfg.Plan.Prefix
	nss, _ := topology.Namespaces(prefix)
	for _, ns := range nss {
		out = append(out, "namespace "+ns)
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "/"+prefix) || strings.Contains(line, l.cfg.StateDir) {
				out = append(out, "mount "+line)
			}
		}
	}
	etc, _ := filepath.Glob(filepath.Join(topology.EtcNetnsDir, prefix+"*"))
	for _, f := range etc {
		out = append(out, "file "+f)
	}
	out = append(out, l.cg.Leftovers()...)
	out = append(out, l.bpffsLeftovers()...)
	if _, err := os.Stat(l.cfg.StateDir); err == nil {
		out = append(out, "file "+l.cfg.StateDir)
	}
	des, _ := os.ReadDir("/proc")
	for _, de := range des {
		pid, err := strconv.Atoi(de.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", de.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cmdline := strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " ")
		if strings.Contains(cmdline, l.cfg.StateDir) || strings.Contains(cmdline, " "+prefix) {
			out = append(out, fmt.Sprintf("process %d: %s", pid, cmdline))
		}
	}
	return out
}

// start runs argv in host's namespace (and cgroup, see placeInCgroup) in the
// background, in a session of its own so it outlives this command, with
// output to the state directory's NAME.log and its pid in NAME.pid. ready,
// when not nil, is the child's end of a pipe that the child writes a line to
// once it serves (fd 3). Host "" is the machine's own namespaces (the
// control-plane lab's kubelet).
func (l *Lab) start(name, host string, argv []string, withReady bool) (*exec.Cmd, *os.File, error) {
	logf, err := os.OpenFile(l.logPath(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	defer logf.Close()
	ns := "the machine's namespace"
	cmd := exec.Command(argv[0], argv[1:]...)
	if host != "" {
		ns = l.cfg.Plan.Namespace(host)
		cmd = exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if h, ok := l.host(host); ok {
		// A pod's server, say, is born in the pod's cgroup (topology/cgroup.go).
		release, err := l.cg.Place(cmd, h)
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
	l.mu.Lock()
	l.children = append(l.children, cmd)
	l.mu.Unlock()
	// `ip netns exec` execs the command, so this pid is the command's own.
	if err := os.WriteFile(l.pidPath(name), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		return nil, nil, err
	}
	return cmd, readyR, nil
}

// reap collects the exit status of the processes this process started and
// that have ended, so none stays a zombie while the demo runs on.
func (l *Lab) reap() {
	l.mu.Lock()
	defer l.mu.Unlock()
	var keep []*exec.Cmd
	for _, c := range l.children {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(c.Process.Pid, &ws, syscall.WNOHANG, nil)
		if pid == 0 && err == nil {
			keep = append(keep, c) // still running
		}
	}
	l.children = keep
}

func (l *Lab) logPath(name string) string { return filepath.Join(l.cfg.StateDir, name+".log") }
func (l *Lab) pidPath(name string) string { return filepath.Join(l.cfg.StateDir, name+".pid") }

// readPid returns the pid of the lab process name, if it still runs in host
// ("": in the machine's namespaces, with the state directory on its command line).
func (l *Lab) readPid(name, host string) (int, bool) {
	b, err := os.ReadFile(l.pidPath(name))
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
		return pid, err == nil && topology.Alive(pid) && strings.Contains(string(cmdline), l.cfg.StateDir)
	}
	return pid, topology.InNamespace(pid, l.cfg.Plan.Namespace(host))
}

// logTail is the end of a process's log, for error messages.
func (l *Lab) logTail(name string) string {
	f, err := os.Open(l.logPath(name))
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
	return "\n" + name + " log (" + l.logPath(name) + "):\n  " + strings.Join(lines, "\n  ")
}
