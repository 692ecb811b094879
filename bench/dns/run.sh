#!/bin/sh
# Benchmark clusterdns against CoreDNS v1.14.6, the version kubeadm v1.37.2
# deploys (with kubeadm's Corefile), on the same
# machine and load, for 2,000 and 20,000 Services: a real API server (etcd and
# kube-apiserver, test/kapi) holds the Services; CoreDNS and clusterdns watch
# it, and clusterdns also reads them from a manifests file. dnsperf measures
# the highest QPS and latency at a fixed 10,000 QPS; RSS after. Prints the
# side-by-side table and the ratios. CoreDNS is built once from the Go module
# proxy (test/kapi/coredns, `test/kapi/build.sh -coredns`) and cached with the
# Kubernetes programs in ~/.cache/svcproxy/kapi.
# Called by `make bench`; 15 minutes on a quiet machine, over an hour on a busy
# one (filling the API server with 20,000 Services is the API server's CPU).
#
#   bench/dns/run.sh                          # SERVICES=2000,20000 DURATION=10s ROUNDS=3
#                                             # (every server once a round, the order
#                                             # rotated; ratios: the rounds' mean ± 95%)
#   SERVICES=500 DURATION=3s bench/dns/run.sh
#   BASELINE=/tmp/clusterdns.before bench/dns/run.sh   # also an earlier build,
#                                             # with now/baseline ratios
#   APISERVER=/tmp/kapi/kubeconfig SERVICES=20000 bench/dns/run.sh
#                                             # an API server already filled (kept by
#                                             # TestHoldAPIServer, see hold_test.go)
#   JSON=docs/benchmarks/dns.json bench/dns/run.sh
#                                             # also the rows and ratios as JSON
#                                             # (bench/report), for bench/plot
set -eu
# go test runs in bench/dns: the report's path is made absolute from here.
if [ -n "${JSON:-}" ]; then JSON=$(realpath -m "$JSON"); export JSON; fi
cd "$(dirname "$0")/../.."
command -v dnsperf >/dev/null 2>&1 || { echo "bench/dns: needs dnsperf (Debian package dnsperf)" >&2; exit 1; }
GO=${GO:-go}
./test/kapi/build.sh -coredns >/dev/null
SVCPROXY_DNS_BENCH=1 SERVICES="${SERVICES:-2000,20000}" DURATION="${DURATION:-10s}" ROUNDS="${ROUNDS:-3}" \
	$GO test -count=1 -run '^TestCompareCoreDNS$' -timeout "${DNS_BENCH_TIMEOUT:-180m}" -v ./bench/dns | grep -v -e '^=== RUN' -e '^--- ' -e '^PASS' -e '^ok '
