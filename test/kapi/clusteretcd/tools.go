//go:build tools

// Package tools pins the commands this module exists to build, so that
// `go mod tidy` keeps their dependencies. It is never compiled (build tag "tools").
package tools

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "go.etcd.io/etcd/server/v3"
)
