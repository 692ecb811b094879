// Package kapitest runs a real Kubernetes API server for tests: etcd and
// kube-apiserver as child processes on loopback, with random free ports and
// temporary directories, stopped and removed by t.Cleanup.
//
//	srv := kapitest.Start(t)             // ~2 s once the binaries are cached
//	ns := srv.Namespace(t)               // a fresh "svcp-..." namespace
//	srv.Client.CoreV1().Services(ns)...  // or hand srv.Kubeconfig to the code under test
//	srv.Restart(t)                       // kube-apiserver goes away and comes back
//
// No controller-manager runs: nothing makes EndpointSlices, nothing finishes
// deleting a namespace. Tests write the objects a controller would.
//
// The binaries come from package k8sbin (built from the Go module proxy on
// first use, then cached outside the repository). A test skips when they
// cannot be built here: no go command or no module proxy.
package kapitest
