#!/bin/sh
# Installs the Debian packages svcproxy's tests, lab and benchmarks use, when
# they are missing. As a normal user it only says what is missing: the tests
# that need those tools skip with a message.
set -eu

PACKAGES="iptables nftables ipset ipvsadm conntrack iproute2 procps netbase dnsutils dnsmasq-base
  qemu-system-x86 busybox-static cpio kmod xz-utils haproxy wrk dnsperf curl socat strace
  gcc libc6-dev wget netcat-openbsd bind9-host dash
  containerd runc containernetworking-plugins docker.io debootstrap
  chromium"

missing=""
for p in $PACKAGES; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
	echo "install-deps: not root, not installing:$missing (tests that need them will skip)" >&2
	exit 0
fi
echo "install-deps: installing:$missing"
export DEBIAN_FRONTEND=noninteractive
# docker.io's and containerd's maintainer scripts start their daemons unless
# policy-rc.d denies it (exit 101): the project starts dockerd itself, in the
# lab's namespaces (lab/engine), never in the machine's own.
if [ ! -e /usr/sbin/policy-rc.d ]; then
	printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
	chmod 755 /usr/sbin/policy-rc.d
	trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >/dev/null
