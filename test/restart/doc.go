// Package restart measures, on the real kernel in network namespaces, how many
// connections fail while svcproxy restarts (SIGTERM and SIGKILL) or shuts down
// under a connection loop, per mode: userspace, iptables, and hybrid with a
// promoted port. The kernel modes promise none (their rules outlive the
// process, and a new process syncs nothing before its sources have synced);
// userspace cannot keep that promise (its listeners die with the process), so
// its figures are logged, not asserted. IPVS is measured in test/vm.
package restart
