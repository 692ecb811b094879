// Package link puts the network links and addresses that svcproxy owns behind a small
// Interface: IPVS mode needs a dummy interface holding every service IP, so the node
// accepts packets to those IPs as its own and IPVS, on the INPUT path, sees them.
//
// Netlink talks rtnetlink through github.com/vishvananda/netlink in the network
// namespace of the OS thread that called New; Fake keeps links and addresses in memory.
package link
