// Command runc-capbound is runc for a machine that withholds capabilities:
// it removes from a container's capability sets every capability its own
// bounding set lacks, then runs the real runc with the same arguments.
//
// A privileged container asks runc for every capability the engine knows.
// On a machine whose bounding set lacks one (these machines withhold
// CAP_SYS_RESOURCE: `grep CapBnd /proc/self/status` prints 000001fffeffffff,
// bit 24 clear), no process can hold it, and runc fails to start the
// container: "unable to apply caps: operation not permitted". kubeadm's
// kube-proxy DaemonSet is privileged, and so is every node of kind. With
// this program as the engine's runtime binary, those containers get every
// capability the machine can give, which is what privileged means here.
//
// It rewrites the file runc reads the capabilities from, in place:
//
//	runc [global flags] create --bundle DIR ... ID    DIR/config.json, process.capabilities
//	runc [global flags] run --bundle DIR ... ID       the same
//	runc [global flags] exec --process FILE ... ID    FILE, capabilities
//
// (no --bundle: the working directory, as runc does), and leaves every other
// command alone. The real runc is $RUNC_CAPBOUND_RUNC, or the first runc on
// PATH that is not this program. On a machine that withholds nothing it
// changes nothing.
//
// The lab's nodes name it as containerd's runc binary:
//
//	[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
//	  BinaryName = "/path/to/runc-capbound"
//
// and dockerd takes it as `--add-runtime capbound=/path/to/runc-capbound
// --default-runtime capbound`. With runc's --debug flag it says on stderr
// what it removed.
package main
