// Package engine runs a Docker daemon kept inside the lab: Debian's dockerd
// in a network namespace and a mount namespace of its own, with everything it
// keeps (images, containers, its containerd, pid file, socket, log) under one
// state directory. It is the container engine kind needs, on a machine whose
// own namespace must not gain a bridge or an iptables rule.
//
// What Start makes, in order, and Stop removes in reverse:
//
//   - the state directory, bind-mounted on itself and made a private mount,
//     so that it can keep a mount namespace (as `ip netns add` keeps a
//     network namespace in /run/netns);
//   - a network namespace (`ip netns add NAME`) with its loopback up. dockerd
//     makes its bridge, its veth pairs and its iptables chains (FORWARD DROP,
//     DOCKER, DOCKER-USER, ...) there, and turns on ip_forward there: both are
//     per network namespace;
//   - a mount namespace, kept at STATE/ns/mnt, where the mounts dockerd needs
//     are made: a sysfs of the new network namespace on /sys (so that
//     /sys/class/net shows its links), a tmpfs on /sys/fs/cgroup and the
//     machine's cgroup v1 hierarchies mounted again under it (dockerd
//     fails with "Devices cgroup isn't mounted" without them). Mounts are
//     private there: dockerd's overlay mounts never show on the machine;
//   - dockerd itself, entered into both namespaces by nsenter(1), with
//     --data-root, --exec-root, --pidfile, --config-file and its socket under
//     the state directory, storage driver overlay2, iptables on, its bridge
//     and address pools in 198.19.0.0/16, containers' cgroups under one
//     parent (/enginelab-NAME), and runc-capbound as its default runtime:
//     this machine's bounding set lacks CAP_SYS_RESOURCE, and runc fails
//     every privileged container ("unable to apply caps") unless that
//     capability is removed from the container's sets first.
//
// Stop ends dockerd (SIGTERM; it stops its containers and its containerd),
// kills whatever is left in either namespace or in the containers' cgroups,
// unmounts the mount namespace's pin (its mounts go with it), deletes the
// network namespace, removes the cgroups and the state directory.
package engine

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Defaults for Config. Not "svclab-" anything and not under /run/svclab:
// `svclab down` deletes every network namespace named "svclab-..." (with
// what runs in it) and /run/svclab, and would take a running engine with
// them.
const (
	DefaultName     = "enginelab"
	DefaultStateDir = "/run/enginelab"
	// DefaultBridge is docker0's address; DefaultPool the networks `docker
	// network create` (and kind's network "kind") take, /24 each.
	DefaultBridge = "198.19.240.1/24"
	DefaultPool   = "198.19.244.0/22"
)

// Config names an engine. Two engines with different names and state
// directories run side by side.
type Config struct {
	// Name is the network namespace's name; "" is DefaultName.
	Name string
	// StateDir holds everything dockerd keeps; "" is DefaultStateDir. Its
	// path must be short: dockerd's containerd puts sockets under it.
	StateDir string
	// Runc is runc-capbound (cmd/runc-capbound), dockerd's default runtime.
	Runc string
	// Dockerd and Docker are the daemon and its client; "" looks them up on
	// PATH (Debian's docker.io installs /usr/sbin/dockerd, /usr/bin/docker).
	Dockerd, Docker string
	// Bridge and Pool are dockerd's --bip and --default-address-pool base;
	// "" is DefaultBridge, DefaultPool.
	Bridge, Pool string
}

// Engine is one dockerd in namespaces of its own.
type Engine struct {
	cfg Config
}

// New returns the engine cfg names, with the defaults filled in. It starts
// nothing.
func New(cfg Config) *Engine {
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if cfg.StateDir == "" {
		cfg.StateDir = DefaultStateDir
	}
	if cfg.Bridge == "" {
		cfg.Bridge = DefaultBridge
	}
	if cfg.Pool == "" {
		cfg.Pool = DefaultPool
	}
	return &Engine{cfg: cfg}
}

// Paths under the state directory.
func (e *Engine) nsDir() string      { return filepath.Join(e.cfg.StateDir, "ns") }
func (e *Engine) mountNS() string    { return filepath.Join(e.nsDir(), "mnt") }
func (e *Engine) pidFile() string    { return filepath.Join(e.cfg.StateDir, "dockerd.pid") }
func (e *Engine) logFile() string    { return filepath.Join(e.cfg.StateDir, "dockerd.log") }
func (e *Engine) configFile() string { return filepath.Join(e.cfg.StateDir, "daemon.json") }

// Socket is dockerd's API socket.
func (e *Engine) Socket() string { return filepath.Join(e.cfg.StateDir, "docker.sock") }

// Host is the socket as DOCKER_HOST names it (what kind and docker read).
func (e *Engine) Host() string { return "unix://" + e.Socket() }

// NetNS is the network namespace's file, for nsenter.Run.
func (e *Engine) NetNS() string { return "/run/netns/" + e.cfg.Name }

// Log is dockerd's log file.
func (e *Engine) Log() string { return e.logFile() }

// CgroupParent is where dockerd puts its containers' cgroups, in every
// cgroup v1 hierarchy.
func (e *Engine) CgroupParent() string { return "/enginelab-" + e.cfg.Name }

// Start makes the namespaces, starts dockerd and waits until it answers on
// its socket. On failure it removes what it made.
func (e *Engine) Start(ctx context.Context) (err error) {
	for _, name := range []*string{&e.cfg.Dockerd, &e.cfg.Docker} {
		if *name == "" {
			continue
		}
		if _, err := exec.LookPath(*name); err != nil {
			return fmt.Errorf("engine: %w", err)
		}
	}
	dockerd := e.cfg.Dockerd
	if dockerd == "" {
		if dockerd, err = exec.LookPath("dockerd"); err != nil {
			return fmt.Errorf("engine: dockerd: %w (Debian's docker.io; `make deps` installs it)", err)
		}
	}
	if e.cfg.Runc == "" {
		return errors.New("engine: Config.Runc: runc-capbound's path is required")
	}
	if _, err := os.Stat(e.cfg.StateDir); err == nil {
		return fmt.Errorf("engine: %s exists: an engine is up there, or was not stopped (Stop removes it)", e.cfg.StateDir)
	}
	defer func() {
		if err != nil {
			if serr := e.Stop(context.WithoutCancel(ctx)); serr != nil {
				err = fmt.Errorf("%w (and removing what was made: %v)", err, serr)
			}
		}
	}()
	if err := e.makeNamespaces(ctx); err != nil {
		return err
	}
	if err := os.WriteFile(e.configFile(), []byte("{}\n"), 0o644); err != nil {
		return err
	}
	return e.startDockerd(ctx, dockerd)
}

// makeNamespaces makes the state directory, the network namespace and the
// mount namespace with dockerd's mounts in it.
func (e *Engine) makeNamespaces(ctx context.Context) error {
	if err := os.MkdirAll(e.nsDir(), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(e.mountNS(), nil, 0o644); err != nil {
		return err
	}
	dir := e.nsDir()
	steps := [][]string{
		{"ip", "netns", "add", e.cfg.Name},
		{"ip", "-n", e.cfg.Name, "link", "set", "lo", "up"},
		// The pin's directory must be a private mount of its own, or the
		// kernel refuses to keep a mount namespace there.
		{"mount", "--bind", dir, dir},
		{"mount", "--make-private", dir},
		{"unshare", "--mount=" + e.mountNS(), "--propagation", "private", "true"},
	}
	for _, argv := range steps {
		if err := run(ctx, argv...); err != nil {
			return err
		}
	}
	mounts, err := e.mounts()
	if err != nil {
		return err
	}
	for _, argv := range mounts {
		if err := run(ctx, e.inside(argv...)...); err != nil {
			return err
		}
	}
	return nil
}

// inside is argv run in the engine's two namespaces.
func (e *Engine) inside(argv ...string) []string {
	return append([]string{"nsenter", "--mount=" + e.mountNS(), "--net=" + e.NetNS(), "--"}, argv...)
}

// mounts are the commands that prepare the mount namespace: sysfs of the
// network namespace, and the machine's cgroup v1 hierarchies, each with the
// options it has on the machine (the same options reach the same hierarchy).
func (e *Engine) mounts() ([][]string, error) {
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	cmds := [][]string{
		{"mount", "-t", "sysfs", "sysfs", "/sys"},
		{"mount", "-t", "tmpfs", "-o", "mode=755", "cgroup", "/sys/fs/cgroup"},
	}
	for _, h := range cgroupV1(info) {
		cmds = append(cmds,
			[]string{"mkdir", "-p", h.point},
			[]string{"mount", "-t", "cgroup", "-o", h.options, "cgroup", h.point})
	}
	return cmds, nil
}

// hierarchy is a cgroup v1 mount: where, and its controllers (or name=).
type hierarchy struct{ point, options string }

// cgroupV1 returns the cgroup v1 mounts under /sys/fs/cgroup in mountinfo.
func cgroupV1(mountinfo []byte) []hierarchy {
	var hs []hierarchy
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	for sc.Scan() {
		// 32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 || g[0] != "cgroup" || f[3] != "/" || !strings.HasPrefix(f[4], "/sys/fs/cgroup/") {
			continue
		}
		var opts []string
		for _, o := range strings.Split(g[2], ",") {
			if o != "rw" && o != "ro" {
				opts = append(opts, o)
			}
		}
		hs = append(hs, hierarchy{point: f[4], options: strings.Join(opts, ",")})
	}
	return hs
}

// dockerdArgs is dockerd's command line.
func (e *Engine) dockerdArgs(dockerd string) []string {
	return []string{dockerd,
		"--host", e.Host(),
		"--data-root", filepath.Join(e.cfg.StateDir, "data"),
		"--exec-root", filepath.Join(e.cfg.StateDir, "exec"),
		"--pidfile", e.pidFile(),
		// Also where dockerd 20.10 keeps key.json: the file's directory.
		"--config-file", e.configFile(),
		"--storage-driver", "overlay2",
		"--iptables=true",
		"--bip", e.cfg.Bridge,
		"--default-address-pool", "base=" + e.cfg.Pool + ",size=24",
		"--cgroup-parent", e.CgroupParent(),
		"--exec-opt", "native.cgroupdriver=cgroupfs",
		"--add-runtime", "capbound=" + e.cfg.Runc,
		"--default-runtime", "capbound",
		// Containers get this long to stop when dockerd stops.
		"--shutdown-timeout", "5",
	}
}

// startDockerd starts dockerd in the namespaces, in a session of its own (it
// outlives the process that started it, as `svclab up`'s daemons do), and
// waits for its API.
func (e *Engine) startDockerd(ctx context.Context, dockerd string) error {
	logf, err := os.OpenFile(e.logFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	argv := e.inside(e.dockerdArgs(dockerd)...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+filepath.Join(e.cfg.StateDir, "client"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("engine: start dockerd: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	client := e.HTTPClient()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := e.ping(ctx, client); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("engine: dockerd did not answer on %s within 60s: %v; its log:\n%s", e.Socket(), err, tail(e.logFile()))
		}
		select {
		case err := <-exited:
			return fmt.Errorf("engine: dockerd exited (%v); its log:\n%s", err, tail(e.logFile()))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// HTTPClient talks to dockerd's API on its socket (URLs "http://docker/...").
func (e *Engine) HTTPClient() *http.Client {
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", e.Socket())
		}},
	}
}

// ping asks dockerd's /_ping, which answers "OK" once the daemon serves.
func (e *Engine) ping(ctx context.Context, c *http.Client) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker/_ping", nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(body) != "OK" {
		return fmt.Errorf("/_ping: %s %q", resp.Status, body)
	}
	return nil
}

// Ping checks that dockerd answers on its socket.
func (e *Engine) Ping(ctx context.Context) error { return e.ping(ctx, e.HTTPClient()) }

// Docker runs the docker client against this engine (DOCKER_HOST set, its
// configuration under the state directory) with stdin, and returns its
// standard output; the error carries its standard error.
func (e *Engine) Docker(ctx context.Context, stdin io.Reader, args ...string) (string, error) {
	docker := e.cfg.Docker
	if docker == "" {
		docker = "docker"
	}
	cmd := exec.CommandContext(ctx, docker, args...)
	cmd.Env = append(os.Environ(), e.Env()...)
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// Env is what a docker client or kind needs in its environment to use this
// engine.
func (e *Engine) Env() []string {
	return []string{"DOCKER_HOST=" + e.Host(), "DOCKER_CONFIG=" + filepath.Join(e.cfg.StateDir, "client")}
}

// Stop ends dockerd and everything it started and removes what Start made.
// It is safe on an engine that is partly made or already gone.
func (e *Engine) Stop(ctx context.Context) error {
	var errs []error
	if pid, ok := readPid(e.pidFile()); ok {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		// dockerd gives its containers --shutdown-timeout, then stops
		// its containerd.
		waitGone([]int{pid}, 20*time.Second)
	}
	// Whatever is left: shims, containers, a dockerd that did not write
	// its pid file yet.
	for range 3 {
		pids := e.processes()
		if len(pids) == 0 {
			break
		}
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		waitGone(pids, 5*time.Second)
	}
	if pids := e.processes(); len(pids) > 0 {
		errs = append(errs, fmt.Errorf("engine: processes left after SIGKILL: %v", pids))
	}
	for _, m := range []string{e.mountNS(), e.nsDir()} {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("engine: umount %s: %w", m, err))
		}
	}
	if _, err := os.Stat(e.NetNS()); err == nil {
		if err := run(ctx, "ip", "netns", "del", e.cfg.Name); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, e.removeCgroups()...)
	if err := os.RemoveAll(e.cfg.StateDir); err != nil {
		errs = append(errs, fmt.Errorf("engine: %w", err))
	}
	return errors.Join(errs...)
}

// processes are the pids in the engine's network or mount namespace, or in
// its containers' cgroups (a container has a network namespace of its own).
func (e *Engine) processes() []int {
	want := map[string]bool{}
	for kind, path := range map[string]string{"net": e.NetNS(), "mnt": e.mountNS()} {
		var st unix.Stat_t
		if unix.Stat(path, &st) == nil && st.Dev != 0 && isNSFS(path) {
			want[fmt.Sprintf("%s:[%d]", kind, st.Ino)] = true
		}
	}
	self := os.Getpid()
	seen := map[int]bool{}
	entries, _ := os.ReadDir("/proc")
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid == self {
			continue
		}
		for _, kind := range []string{"net", "mnt"} {
			l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, kind))
			if err == nil && want[l] {
				seen[pid] = true
			}
		}
	}
	for _, h := range e.cgroupDirs() {
		_ = filepath.WalkDir(h, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid != self {
					seen[pid] = true
				}
			}
			return nil
		})
	}
	pids := make([]int, 0, len(seen))
	for p := range seen {
		pids = append(pids, p)
	}
	return pids
}

// isNSFS reports whether path is a namespace file (the pins are plain
// empty files once unmounted).
func isNSFS(path string) bool {
	var s unix.Statfs_t
	return unix.Statfs(path, &s) == nil && s.Type == unix.NSFS_MAGIC
}

// cgroupDirs are the containers' cgroup parent in each of the machine's
// cgroup v1 hierarchies that has it.
func (e *Engine) cgroupDirs() []string {
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var dirs []string
	for _, h := range cgroupV1(info) {
		d := filepath.Join(h.point, e.CgroupParent())
		if _, err := os.Stat(d); err == nil {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// removeCgroups removes the containers' cgroups, deepest first (a cgroup is
// removed with rmdir, once it has no children and no processes).
func (e *Engine) removeCgroups() []error {
	var errs []error
	for _, top := range e.cgroupDirs() {
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := unix.Rmdir(dirs[i]); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("engine: rmdir %s: %w", dirs[i], err))
			}
		}
	}
	return errs
}

func readPid(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid, err == nil && pid > 0
}

// waitGone waits until none of pids exists (or is a zombie someone else
// reaps), or until timeout.
func waitGone(pids []int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		alive := false
		for _, p := range pids {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p)); err == nil && !isZombie(b) {
				alive = true
			}
		}
		if !alive {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// isZombie reads the state field of /proc/PID/stat ("PID (comm) S ...").
func isZombie(stat []byte) bool {
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

// run runs argv and returns its output in the error if it fails.
func run(ctx context.Context, argv ...string) error {
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("engine: %s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// tail is the end of a log file, for an error.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}
