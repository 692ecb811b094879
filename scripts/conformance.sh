#!/bin/sh
# make conformance: Kubernetes' own Service and DNS conformance tests (e2e.test
# v1.37.2) against svcproxy and clusterdns, in each mode of MODE, one after the
# other. NODES=1 (the default) runs them on the lab's real node (svclab up
# --kubelet), MODE by default userspace, iptables, nftables and hybrid.
# NODES=2 or 3 runs them on the cluster kubeadm makes (svclab up --nodes N):
# MODE kube-proxy-iptables and kube-proxy-nftables are the baseline, the real
# kube-proxy and CoreDNS; any other mode is svcproxy's (svclab use svcproxy,
# svclab use clusterdns, svclab mode MODE); by default the two baselines,
# then iptables, nftables, hybrid and userspace. For each mode it brings the
# lab up, runs e2e.test in the (control-plane) node's network namespace (the
# admin kubeconfig names the API server there), prints the e2e summary as a
# line "N passed, N failed, N skipped", and always brings the lab down.
# The whole e2e output goes to bin/conformance-$MODE.log (with NODES above 1,
# bin/conformance-N-nodes-$MODE.log). docs/conformance.md says what runs, what
# is skipped and why, and the figures of the last run.
#
# Needs root, `make build image conformance-bins e2e-images` (and with NODES
# above 1 `make cluster-bins kubeadm-images`; the Makefile's conformance target
# runs them first). Exit status: e2e.test's (0: no failure).
set -eu
cd "$(dirname "$0")/.."
. scripts/conformance-lib.sh

NODES=${NODES:-1}
if [ "$NODES" = 1 ]; then
	MODE=${MODE:-userspace iptables nftables hybrid}
else
	MODE=${MODE:-kube-proxy-iptables kube-proxy-nftables iptables nftables hybrid userspace}
fi
# The kubeadm cluster runs 16 more tests, several of them [Serial].
E2E_TIMEOUT=${E2E_TIMEOUT:-$([ "$NODES" = 1 ] && echo 1500 || echo 2700)}
BIN=${BIN:-$(pwd)/bin}
export BIN E2E_TIMEOUT NODES

# What runs: the Service, DNS, EndpointSlice and pod networking conformance
# tests of sig-network, and every other "[sig-network] Services should" test
# (session affinity timeouts, type changes, named target ports per endpoint,
# traffic policies, no endpoints, hairpin, ...). FOCUS, a Ginkgo regular
# expression, narrows it to one test while a failure is fixed.
FOCUS=${FOCUS:-'\[sig-network\].*(Services|DNS|EndpointSlice|Networking).*\[Conformance\]|\[sig-network\] Services should'}
# What is skipped: on one node, the tests that need more than one node (they
# would skip themselves at run time), a component run as a pod that that lab
# runs as a process, or a privileged pod that enters the machine's own mount
# namespace; on the kubeadm cluster only the last. Each is listed with its
# reason in docs/conformance.md; a skip is added only here, beside the docs.
if [ "$NODES" = 1 ]; then
	SKIP=${SKIP-'should preserve source pod IP for traffic thru service cluster IP|PublishNotReadyAddresses is (true|false)|should respect internalTrafficPolicy=Local|should support externalTrafficPolicy=Local for type=NodePort|should fail health check node port if there are only terminating endpoints|should fallback to (local )?terminating endpoints when there are no ready endpoints|HealthCheckNodePort correctly when ExternalTrafficPolicy changes|should work after restarting (kube-proxy|apiserver)|should allow creating a basic SCTP service'}
else
	SKIP=${SKIP-'should allow creating a basic SCTP service'}
fi

if [ "$NODES" = 1 ]; then
	eval "$(./test/kapi/build.sh -node -conformance)"
else
	eval "$(./test/kapi/build.sh -node -conformance -cluster)"
fi
if [ ! -x "${E2E_TEST:-}" ] || [ ! -x "${KUBECTL:-}" ]; then
	echo "conformance: e2e.test or kubectl is not built: run make conformance-bins" >&2
	exit 1
fi

# The lab's namespaces and state directory have fixed names: a lab test
# (go test ./test/lab) or another lab started meanwhile would tear this one
# down. Wait for the lock test/lab's TestMain takes, and hold it to the end.
# SVCLAB_LOCK_HELD=1: the caller holds it (test/lab's TestConformance).
if [ "${SVCLAB_LOCK_HELD:-}" != 1 ]; then
	exec 9>/run/lock/svclab-test.lock
	if ! flock -n 9; then
		echo "conformance: a lab test holds /run/lock/svclab-test.lock; waiting for it"
		flock 9
	fi
fi

# More than one mode: run this script once per mode (holding the lock for all
# of them), each ending with its own summary line, then the sum of them.
case "$MODE" in *" "*)
	export SVCLAB_LOCK_HELD=1 FOCUS SKIP
	out=$BIN/conformance-
	[ "$NODES" = 1 ] || out=$BIN/conformance-$NODES-nodes-
	conformance_modes conformance "$out" || exit 1
	exit 0
esac

LOG=$BIN/conformance-$MODE.log
[ "$NODES" = 1 ] || LOG=$BIN/conformance-$NODES-nodes-$MODE.log
trap '"$BIN/svclab" --bin "$BIN" down' EXIT
trap 'exit 130' INT TERM

focused=$(conformance_focused)

start=$(date +%s)
svclab() { "$BIN/svclab" --bin "$BIN" "$@"; }
if [ "$NODES" = 1 ]; then
	svclab up --kubelet --mode "$MODE"
else
	case "$MODE" in
	kube-proxy-*) svclab up --nodes "$NODES" --mode "${MODE#kube-proxy-}" ;;
	*)
		svclab up --nodes "$NODES"
		svclab use svcproxy
		svclab use clusterdns
		svclab mode "$MODE"
		;;
	esac
	# kubeadm taints the control-plane node NoSchedule; the e2e framework
	# then counts two schedulable nodes, and "should implement NodePort and
	# HealthCheckNodePort correctly when ExternalTrafficPolicy changes"
	# skips itself for want of three. Test pods may run on every node, as
	# on a kind cluster of one node.
	[ "$NODES" -lt 3 ] || svclab kubectl taint nodes node node-role.kubernetes.io/control-plane:NoSchedule-
fi

set -- --provider=local --kubeconfig=/run/svclab/admin.kubeconfig \
	--kubectl-path="$KUBECTL" --ginkgo.v --ginkgo.no-color --ginkgo.focus="$FOCUS"
[ -n "$SKIP" ] && set -- "$@" --ginkgo.skip="$SKIP"
echo "conformance: e2e.test in svclab-node, mode $MODE, $NODES node(s), log $LOG"
# The nodes' own cost while the tests run: the largest resident set of each
# kubelet and containerd (by their pid files), and of kube-apiserver and etcd
# (by name, among the processes in the lab's own network namespaces: on the
# kubeadm cluster they are static pods; a kind cluster or a benchmark beside
# the run has its own), sampled every 5 s.
rss_max() { # file pid...: keeps in file the largest RSS (KiB) of the pids seen
	f=$1
	shift
	[ $# -gt 0 ] || return 0
	r=$(ps -o rss= -p "$(echo "$@" | tr ' ' ,)" 2>/dev/null | sort -n | tail -1)
	[ -n "$r" ] && [ "$r" -gt "$(cat "$f" 2>/dev/null || echo 0)" ] && echo "$r" >"$f"
	return 0
}
lab_pids() { # name: the pids of processes called name in an svclab-* netns
	for p in $(pgrep -x "$1"); do
		case $(ip netns identify "$p" 2>/dev/null) in svclab-*) echo "$p" ;; esac
	done
}
daemons="kubelet containerd"
[ "$NODES" = 1 ] || for w in $(seq 1 $((NODES - 1))); do daemons="$daemons kubelet-worker$w containerd-worker$w"; done
for d in $daemons kube-apiserver etcd; do rm -f "$BIN/rss-$d"; done
(while :; do
	for d in $daemons; do rss_max "$BIN/rss-$d" $(cat "/run/svclab/$d.pid" 2>/dev/null); done
	for d in kube-apiserver etcd; do rss_max "$BIN/rss-$d" $(lab_pids "$d"); done
	sleep 5
done) &
sampler=$!
rc=0
timeout "$E2E_TIMEOUT" ip netns exec svclab-node \
	env PATH="$(dirname "$KUBECTL"):$PATH" "$E2E_TEST" "$@" >"$LOG" 2>&1 || rc=$?
kill "$sampler" 2>/dev/null || true

conformance_summary conformance "$LOG" "$rc" "$focused" || exit 1
mib() { echo "$(($(cat "$BIN/rss-$1" 2>/dev/null || echo 0) / 1024)) MiB"; }
rsses=""
for d in $daemons kube-apiserver etcd; do rsses="$rsses, $d $(mib "$d")"; done
echo "conformance: mode $MODE, $NODES node(s), $(($(date +%s) - start)) s with the lab's start;" \
	"largest RSS while the tests ran: ${rsses#, }"
exit "$rc"
