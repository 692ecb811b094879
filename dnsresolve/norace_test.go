//go:build !race

package dnsresolve

const raceEnabled = false
