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

MODE=${MODE:-iptables nftables hybrid}
E2E_TIMEOUT=${E2E_TIMEOUT:-2700}
BIN=${BIN:-$(pwd)/bin}
FOCUS=${FOCUS:-'\[sig-network\].*(Services|DNS|EndpointSlice|Networking).*\[Conformance\]|\[sig-network\] Services should'}
# As on the kubeadm cluster: the kernel here has no SCTP (docs/conformance.md).
SKIP=${SKIP-'should allow creating a basic SCTP service'}
export BIN E2E_TIMEOUT FOCUS SKIP

case "$MODE" in *" "*)
	total_p=0 total_f=0 total_s=0 rc=0
	for m in $MODE; do
		out=$BIN/conformance-kind-$m
		{ MODE=$m sh "$0"; echo $? >"$out.rc"; } 2>&1 | tee "$out.out"
		[ "$(cat "$out.rc")" = 0 ] || rc=1
		set -- $(sed -n -E 's/^([0-9]+) passed, ([0-9]+) failed, ([0-9]+) skipped$/\1 \2 \3/p' "$out.out")
		if [ $# -ne 3 ]; then
			echo "conformance-kind: mode $m ended without a summary" >&2
			rc=1
			continue
		fi
		total_p=$((total_p + $1)) total_f=$((total_f + $2)) total_s=$((total_s + $3))
	done
	echo "conformance-kind: modes $MODE together:"
	echo "$total_p passed, $total_f failed, $total_s skipped"
	exit "$rc"
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

focused=$("$E2E_TEST" --provider=local --ginkgo.dry-run --ginkgo.no-color \
	--ginkgo.focus="$FOCUS" 2>/dev/null | sed -n -E 's/^Ran ([0-9]+) of .*/\1/p' | tail -1)

start=$(date +%s)
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

grep -a -E '^Ran [0-9]+ of [0-9]+ Specs' "$LOG" | tail -1 || true
grep -a -E -A40 '^Summarizing [0-9]+ Failure' "$LOG" | grep -a '\[FAIL\]' || true
line=$(grep -a -E -- '-- [0-9]+ Passed \| [0-9]+ Failed \| [0-9]+ Pending \| [0-9]+ Skipped' "$LOG" | tail -1 || true)
if [ -z "$line" ]; then
	echo "conformance-kind: no e2e summary (exit status $rc; timeout is 124): see $LOG" >&2
	exit 1
fi
passed=$(echo "$line" | sed -E 's/.*-- ([0-9]+) Passed.*/\1/')
failed=$(echo "$line" | sed -E 's/.*\| ([0-9]+) Failed.*/\1/')
echo "$passed passed, $failed failed, $((focused - passed - failed)) skipped"
echo "conformance-kind: mode $MODE, kind's three nodes, $(($(date +%s) - start)) s with the cluster's start"
exit "$rc"
