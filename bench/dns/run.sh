#!/bin/sh
# Benchmark clusterdns with dnsperf on loopback, for 2,000 and 20,000 Services.
# Non-interactive and bounded: two query sets of DURATION each per Service
# count, about two minutes in all. Called by `make bench`.
#
#   bench/dns/run.sh                 # SERVICES=2000,20000 DURATION=10s
#   SERVICES=500 DURATION=3s bench/dns/run.sh
set -eu
cd "$(dirname "$0")/../.."
command -v dnsperf >/dev/null 2>&1 || { echo "bench/dns: needs dnsperf (Debian package dnsperf)" >&2; exit 1; }
GO=${GO:-go}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/svcp-dnsbench-XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
$GO build -o "$tmp/clusterdns" ./cmd/clusterdns
$GO build -o "$tmp/dnsbench" ./bench/dns
timeout 15m "$tmp/dnsbench" -clusterdns "$tmp/clusterdns" -dir "$tmp" \
	-services "${SERVICES:-2000,20000}" -duration "${DURATION:-10s}"
