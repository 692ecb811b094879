//go:build tools

// Package tools pins the commands this module exists to build, so that
// `go mod tidy` keeps their dependencies. It is never compiled (build tag "tools").
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kubeadm"
)
