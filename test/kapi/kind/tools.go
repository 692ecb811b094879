//go:build tools

// Package tools pins the command this module exists to build, so that
// `go mod tidy` keeps its dependencies. It is never compiled (build tag "tools").
package tools

import (
	_ "sigs.k8s.io/kind"
)
