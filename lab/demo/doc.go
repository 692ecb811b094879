// Package demo is the narrated walk of `make lab` (`svclab demo`): it builds
// the lab, follows a request from a Service's name to a pod through each of
// svcproxy's modes, and takes the lab down again, checking at each step
// that the student saw what the text says.
//
// Each step is words and code kept apart: its words are a text file of its
// own in text/ (its title, why it matters, and what it showed, as each lab
// of kubernetes-the-hard-way says why before the commands say how), its
// code a small function that shows each command as the student would type
// it, runs it on the lab, and says what was not as expected (steps.go,
// ipvs.go). Run walks the steps, each within a time bound, and the lab
// comes down whatever happened.
package demo
