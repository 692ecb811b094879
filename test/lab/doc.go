// Package lab runs the lab end to end on the real kernel: `svclab demo` with
// the real svcproxy and clusterdns, then the commands of every tutorial, each
// followed by a check that nothing of the lab is left on the machine.
//
// The lab's namespaces have fixed names (svclab-...), so these tests run one
// at a time, never in parallel with each other or with a `make lab`; other
// tests' namespaces (svcp-...) never collide with them.
package lab
