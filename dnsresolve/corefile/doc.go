// Package corefile reads a CoreDNS Corefile into what clusterdns serves.
//
// The Corefile is parsed by CoreDNS's own parser (github.com/coredns/caddy's
// caddyfile package: the same tokens, quotes, blocks, snippets, imports and
// environment variables as CoreDNS), then each plugin is read the way
// CoreDNS v1.14.6's setup function for it reads it, with the same defaults
// and the same limits. A plugin or option clusterdns does not implement is an
// Error naming the file, the line, the plugin and the option, and saying
// what to remove: a Corefile is never half understood. A few options are
// accepted and ignored, each a Notice saying why, which clusterdns logs.
//
// kubeadm's default Corefile (testdata/kubeadm-v1.37.2.Corefile) uses
// errors, health { lameduck }, ready, kubernetes { pods, fallthrough, ttl },
// prometheus, forward { max_concurrent }, cache { disable }, loop, reload and
// loadbalance: all implemented. docs/operations.md lists every plugin and
// option and what clusterdns does with it.
package corefile
