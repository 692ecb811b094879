// Package vm boots a Debian kernel under QEMU and runs a Go test binary inside, for
// the tests that need a kernel feature this machine's kernel lacks (IPVS).
//
// The steps, each cached or cheap:
//
//  1. Kernel: `apt-get download` the linux-image package that linux-image-amd64 depends
//     on into a cache directory outside the repository (~/.cache/svcproxy/vm, or
//     $SVCPROXY_VM_CACHE), unpack it with `dpkg -x` and index its modules with
//     `depmod -b`. Nothing is installed on the host.
//  2. Initramfs: busybox-static, the modules the guest needs (with their dependencies,
//     from modules.dep), the binaries to run, and an /init script, written as a newc
//     cpio archive in Go.
//  3. Boot: qemu-system-x86_64 with TCG (the host's /dev/kvm does not run a stock
//     kernel), no network, the serial console on stdout, stdin closed, under a timeout.
//     QEMU exits 0 whether the guest passed, failed or panicked, so /init prints a
//     result line that Run reads from the console.
//
// TestIPVS in this package builds test/vm/guest with `go test -c` and cmd/svcproxy
// with `go build` (both CGO_ENABLED=0), adds the host's legacy iptables and ipset with
// their libraries (Guest.AddIPTables), and runs the guest tests, which include the
// whole svcproxy in --mode ipvs.
//
// The lab runs in the same VM (lab.go): NewLabGuest adds svclab, svcproxy and
// clusterdns (BuildLab) and the host tools the lab runs (iproute2's ip for `ip
// netns`, dig, curl, ipvsadm). `make lab-ipvs` (the labipvs command) runs `svclab
// demo` there and prints it; TestLab runs the demo's IPVS step and the commands of
// tutorials/07-ipvs.md there and checks their output. `go test -run
// 'TestIPVS|TestLab' -v ./test/vm/` is `make test-ipvs`.
package vm
