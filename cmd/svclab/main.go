package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/svcproxy/svcproxy/lab"
)

const usage = `usage: svclab [--state DIR] [--bin DIR] [--kapi DIR] COMMAND [ARGS]

commands:
  up [--mode MODE] [--control-plane]    build the lab; svcproxy runs in MODE (default userspace);
                                        with --control-plane, etcd, kube-apiserver and
                                        kube-controller-manager run in the node and
                                        svcproxy and clusterdns watch them (make kapi first);
  up --kubelet [--mode MODE]            a real node beside the control plane: containerd, the
                                        kubelet and kube-scheduler in the node, svcproxy (the
                                        DaemonSet, in MODE) and clusterdns as pods of
                                        deploy/realnode, from the images of make image
  up --nodes N [--mode MODE]            a cluster of N nodes (1 to 3) made by kubeadm v1.37.2:
                                        the control plane on node, workers worker1 and worker2,
                                        kube-proxy (in MODE: iptables, the default, nftables)
                                        and CoreDNS as its pods (make cluster-bins
                                        kubeadm-images image; docs/kubeadm.md)
  use svcproxy|kube-proxy|clusterdns|coredns
                                        on the kubeadm cluster, make svcproxy or kube-proxy
                                        serve Services (the image of the DaemonSet
                                        kube-proxy), clusterdns or coredns DNS (the image of
                                        the Deployment coredns), as an operator would; the
                                        pods roll
  kubectl ARGS...                       kubectl against the control-plane lab's API server
  pod NAME --kill|--start|--ready=true|--ready=false|--terminating [-n NAMESPACE]
                                        change one pod: --kill stops its server (a crash; it
                                        stays an endpoint), --start starts it again, --ready
                                        sets its readiness, --terminating marks it deleted
                                        but still serving (file-fed lab); -n: the pod's
                                        namespace in the control-plane lab (default default)
  exec HOST -- CMD [ARGS...]            run a command in a lab host (node, client, web-0, ...)
  traffic [--n N] [--rate R] [--from HOST] [--timeline] [--hold] [--ipv6] TARGET
                                        send N requests (default 30), R per second (default:
                                        each once the last is answered), from lab host HOST
                                        (default client), and show who answered and which
                                        client address each pod saw; --timeline: per second,
                                        how many answers came through userspace and kernel;
                                        --hold: keep one more connection open from before the
                                        first request to after the last, and fail unless it
                                        survived (HTTP only); --ipv6: resolve TARGET to its
                                        IPv6 address (AAAA)
                                        TARGET: web, web.default.svc.cluster.local,
                                        198.18.0.20:80, udp://echo:7, 198.19.0.1:30080,
                                        [2001:db8:18::24]:80
  rules [SERVICE] [--counters] [--node NODE]
                                        svcproxy's iptables and ip6tables chains, nftables
                                        tables and IPVS table in the node (socklb mode: the
                                        socket LB's maps too, on the kubeadm cluster the
                                        node's own), hashed chains
                                        named in a legend, and the real kube-proxy's where it
                                        runs; with SERVICE only that Service's;
                                        --counters: the packets each rule matched; --node: a
                                        worker of the kubeadm cluster
  trace FROM SERVICE[:PORT] [--pick N] [--node NODE]
                                        walk the first packet of a connection from lab host
                                        FROM through the node's live rules: chain, rule,
                                        DNAT or REDIRECT, masquerade (socklb mode: from a pod
                                        or the client, connect() through the socket LB's
                                        program first); --pick N follows the Nth random choice
  conntrack [SERVICE] [--flush] [--node NODE]
                                        the node's conntrack entries, explained; --flush
                                        empties the table
  mode [--ipvs-scheduler S] [--offload P] [--demote-after D] MODE
                                        restart svcproxy in MODE: userspace, iptables,
                                        nftables, ipvs, socklb (the socket LB, attached at
                                        the lab's cgroup2 subtree), hybrid;
                                        IPVS schedules with S (rr, wrr, lc, wlc, sh, dh, sed, nq);
                                        hybrid promotes to P (nftables, ipvs, iptables, socklb)
                                        and demotes after D below the promotion rate;
                                        on the real node: its ConfigMap, then a rollout;
                                        on the kubeadm cluster: kube-proxy's ConfigMap,
                                        then new pods (socklb: each node's attaches at its
                                        kubelet's cgroup root; docs/kubeadm.md)
  web [--listen ADDR]                   serve a live page of the lab: hosts, the cluster's
                                        nodes and the pods on each, Services with
                                        their path, endpoints and counters, hybrid's timeline,
                                        a traced packet, controls; on loopback only
                                        (127.0.0.1:8088) unless ADDR says otherwise
  check NN                              check tutorial NN's exercise on the lab as it is now:
                                        ok, or what is missing and a hint (exit status 1)
  down                                  remove every namespace, process and file of the lab
  demo [--control-plane=auto|true|false] [--only WORD]
                                        up, a narrated walk through the lab, down; on a
                                        control plane when its programs are built (auto);
                                        --only ipvs: just the steps whose title has WORD

global flags:
  --state DIR   the lab's state: pid files, logs, manifests (default /run/svclab)
  --bin DIR     look for svcproxy and clusterdns here first (default: next to svclab)
  --kapi DIR    the control plane's programs, and the real node's kubelet and
                kube-scheduler (default: make kapi's cache)

svclab COMMAND --help says more about pod, rules, trace, conntrack and check. Every command
needs root. svcproxy and clusterdns are looked for next to svclab, then on PATH
(go build -o bin/ ./cmd/... builds all three).
`

func main() {
	closeInherited()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// closeInherited marks every descriptor svclab inherited beyond the standard
// three close-on-exec, so that the processes it leaves running (the control
// plane, svcproxy, the pods) do not hold them: `flock LOCK svclab up` would
// otherwise keep LOCK held by the lab's daemons after svclab exits. The
// descriptors svclab passes on itself (a pod's ready pipe) are given
// explicitly and are not affected.
func closeInherited() {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, fd := range fds {
		if n, err := strconv.Atoi(fd.Name()); err == nil && n > 2 {
			syscall.CloseOnExec(n)
		}
	}
}

// exitError carries a command's own exit status through (svclab exec).
type exitError struct{ code int }

func (e exitError) Error() string { return "exit status " + strconv.Itoa(e.code) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("svclab", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	stateDir := fs.String("state", lab.DefaultStateDir, "the lab's state `DIR`: pid files, logs, manifests")
	binDir := fs.String("bin", "", "look for svcproxy and clusterdns in `DIR` first (default: next to svclab)")
	kapiDir = fs.String("kapi", "", "the control plane's programs are in `DIR` (default: make kapi's cache)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	name, rest := fs.Arg(0), fs.Args()[1:]
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "svclab: unknown command %q\n%s", name, usage)
		return 2
	}
	if c.root && os.Geteuid() != 0 && !wantsHelp(rest) {
		fmt.Fprintf(stderr, "svclab %s needs root: it creates network namespaces and runs svcproxy inside them (try: sudo make lab)\n", name)
		return 1
	}
	cfg := lab.Config{StateDir: *stateDir, BinDir: *binDir, Stdout: stdout, Stderr: stderr, Progress: isTerminal(stdout)}
	err := c.run(ctx, cfg, rest)
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, flag.ErrHelp):
		return 0
	default:
		fmt.Fprintf(stderr, "svclab %s: %v\n", name, err)
		return 1
	}
}

// wantsHelp says whether a command is asked only for its --help, which
// needs no root.
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "-h", "-help", "--help":
			return true
		case "--":
			return false
		}
	}
	return false
}

type command struct {
	root bool
	run  func(ctx context.Context, cfg lab.Config, args []string) error
}

var commands = map[string]command{
	"up":        {root: true, run: cmdUp},
	"exec":      {root: true, run: cmdExec},
	"traffic":   {root: true, run: cmdTraffic},
	"rules":     {root: true, run: cmdRules},
	"trace":     {root: true, run: cmdTrace},
	"conntrack": {root: true, run: cmdConntrack},
	"mode":      {root: true, run: cmdMode},
	"use":       {root: true, run: cmdUse},
	"down":      {root: true, run: cmdDown},
	"demo":      {root: true, run: cmdDemo},
	"kubectl":   {root: true, run: cmdKubectl},
	"web":       {root: true, run: cmdWeb},
	"check":     {root: true, run: cmdCheck},
	// `svclab pod NAME --ready=BOOL` by users; `svclab pod --name NAME ...`,
	// a pod's server, by svclab itself inside lab hosts.
	"pod": {run: cmdPod},
	// Run by svclab itself inside lab hosts.
	"probe":   {run: cmdProbe},
	"kubelet": {root: true, run: cmdKubelet},
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// flagSet says whether the flag name was given.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// parse parses a command's flags and wants exactly want positional arguments.
func parse(fs *flag.FlagSet, args []string, want int) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != want {
		return fmt.Errorf("want %d argument(s), got %d: %s", want, fs.NArg(), strings.Join(fs.Args(), " "))
	}
	return nil
}

// kapiDir is the global --kapi flag.
var kapiDir *string
