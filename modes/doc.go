// Package modes builds the dataplane a --mode asks for on this node, from one
// Config: what svcproxy's flags say (cmd/svcproxy maps them; a
// KubeProxyConfiguration can be mapped the same way). It sits at the top of
// the house, above the paths it puts together, and holds no path of its own:
//
//   - the mode, after kube-proxy's fallback: IPVS or nftables where the
//     kernel (or the nft tool) lacks it runs iptables instead, logged;
//   - one dataplane per IP family the namespace serves (dataplane.Families),
//     each family's node seen through dataplane.Host.Node;
//   - each path by its package's New(Config): userspace.New, hybrid.New over
//     a kernel path, offload/{iptables,nftables,ipvs,socklb}.New, and the
//     localhost NodePort listeners beside nftables (hybrid/localhost) when
//     --nodeport-addresses names loopback;
//   - the node's one socket LB (kernel/socklb/lifecycle), opened for the
//     modes that use it and removed for the others;
//   - Cleanup, what --cleanup removes of every mode.
//
// The kernel handles are the node's real ones (kernel/...): the paths'
// packages are tested on their Fakes, this one by running svcproxy
// (cmd/svcproxy's tests).
package modes
