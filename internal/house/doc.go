// Package house holds the test of the house's rooms: which package may
// import which (house_test.go). It has no code of its own.
//
// The rules, checked on `go list` of every package of the module, over the
// imports of its non-test files:
//
//   - product code never imports test support. Test support is what only
//     tests may use: everything under test/, the packages named as Go names
//     test helpers (kapitest, netnstest, offloadtest, proxytest, ruletest,
//     servicetest: ending in "test"), internal/testbin and internal/tutorial.
//     Product is every other package but bench/, whose benchmarks may link
//     the testing package;
//   - imports run down the house, never back up: the contract (dataplane)
//     imports no path and no composition; a path (userspace, offload/...)
//     imports no other path (offload/kernelsync, the rule paths' shared
//     part, excepted) and no composition (hybrid, hybrid/localhost, modes);
//     hybrid imports no modes; the kernel (kernel/...) imports nothing of
//     the proxy above it, not even the domain (service); and the domain
//     (service/...) imports nothing above it.
package house
