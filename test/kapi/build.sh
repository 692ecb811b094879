#!/bin/sh
# Builds (or finds in the cache) kube-apiserver and etcd for svcproxy's tests and
# prints where they are:
#   APISERVER=/root/.cache/svcproxy/kapi/<versions>/kube-apiserver
#   ETCD=/root/.cache/svcproxy/kapi/<versions>/etcd
# A cold build takes ~5 minutes and ~2.4 GB of memory; a cached one, a second.
# Exit status 2: no go command or no module proxy (the tests would skip).
set -eu
cd "$(dirname "$0")/../.."
exec go run ./test/kapi "$@"
