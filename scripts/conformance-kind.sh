#!/bin/sh
# make conformance-kind: Kubernetes' own Service and DNS conformance tests
# (e2e.test v1.37.2, the focus of scripts/conformance.sh) against svcproxy and
# clusterdns on kind's cluster (make kind-up), in each mode of MODE (default
# iptables nftables hybrid), one after the other. For each mode it brings the
# cluster up (lab/kind: engine, node image, kind create, deploy/kind, check),
# sets svcproxy's mode in its ConfigMap and restarts its DaemonSet, loads the
# e2e images (make e2e-images) with kind load image-archive, runs e2e.test in
# the engine's network namespace with kind's kubeconfig, prints the e2e
# summary as "N passed, N failed, N skipped", and always brings the cluster
# down. The e2e output goes to bin/conformance-kind-$MODE.log.
#
# Needs root, `make build kind-bin image e2e-images conformance-bins` and
# bin/kind-node.tar (make kind-image); the Makefile's target runs the others.
set -eu
cd "$(dirname "$0")/.."
. scripts/conformance-lib.sh

MODE=${MODE:-iptables nftables hybrid}
E2E_TIMEOUT=${E2E_TIMEOUT:-2700}
BIN=${BIN:-$(pwd)/bin}
FOCUS=${FOCUS:-'\[sig-network\].*(Services|DNS|EndpointSlice|Networking).*\[Conformance\]|\[sig-network\] Services should'}
# As on the kubeadm cluster: the kernel here has no SCTP (docs/conformance.md).
SKIP=${SKIP-'should allow creating a basic SCTP service'}
export BIN E2E_TIMEOUT FOCUS SKIP

case "$MODE" in *" "*)
	conformance_modes conformance-kind "$BIN/conformance-kind-" || exit 1
	exit 0
esac

eval "$(./test/kapi/build.sh -conformance -kind)"
if [ ! -x "${E2E_TEST:-}" ] || [ ! -x "${KUBECTL:-}" ]; then
	echo "conformance-kind: e2e.test or kubectl is not built: run make conformance-bins" >&2
	exit 1
fi
LOG=$BIN/conformance-kind-$MODE.log
kindlab() { go run ./lab/kind/kindlab "$@"; }
trap 'kindlab down' EXIT
trap 'exit 130' INT TERM

focused=$(conformance_focused)

start=$(date +%s)
# For the record (docs/conformance.md): which kind, and when its cluster
# started.
echo "conformance-kind: mode $MODE, $("$KIND" version), kind-up at $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
kindlab up
kindlab kubectl -n kube-system patch configmap svcproxy --type merge -p "{\"data\":{\"mode\":\"$MODE\"}}"
kindlab kubectl -n kube-system rollout restart daemonset/svcproxy
kindlab kubectl -n kube-system rollout status daemonset/svcproxy --timeout=180s
# As make conformance NODES=3: test pods may run on every node, so that
# "should implement NodePort and HealthCheckNodePort correctly when
# ExternalTrafficPolicy changes" finds the three schedulable nodes it needs.
kindlab kubectl taint nodes kind-control-plane node-role.kubernetes.io/control-plane:NoSchedule-
for f in "$BIN"/e2e-images/*.tar; do
	DOCKER_HOST=unix:///run/kindlab/engine/docker.sock DOCKER_CONFIG=/run/kindlab/engine/client \
		"$KIND" load image-archive "$f" --name kind
done

set -- --provider=local --kubeconfig=/run/kindlab/kubeconfig \
	--kubectl-path="$KUBECTL" --ginkgo.v --ginkgo.no-color --ginkgo.focus="$FOCUS"
[ -n "$SKIP" ] && set -- "$@" --ginkgo.skip="$SKIP"
echo "conformance-kind: e2e.test in the engine's namespace kindlab, mode $MODE, log $LOG"
rc=0
timeout "$E2E_TIMEOUT" nsenter --net=/run/netns/kindlab \
	env PATH="$(dirname "$KUBECTL"):$PATH" "$E2E_TEST" "$@" >"$LOG" 2>&1 || rc=$?

conformance_summary conformance-kind "$LOG" "$rc" "$focused" || exit 1
echo "conformance-kind: mode $MODE, kind's three nodes, $(($(date +%s) - start)) s with the cluster's start"
exit "$rc"
