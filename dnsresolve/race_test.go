//go:build race

package dnsresolve

// raceEnabled: the race detector's instrumentation allocates.
const raceEnabled = true
