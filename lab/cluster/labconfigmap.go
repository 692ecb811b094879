package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
)

// The control-plane lab applies deploy/lab, whose ConfigMap kube-system/svcproxy
// holds the keys the DaemonSet of deploy/base turns into svcproxy's flags.
// There, no DaemonSet runs: svclab starts svcproxy itself in the node, with
// flags, and `svclab mode` restarts it. A learner who reads the ConfigMap, as
// kube-proxy's lessons teach, must not read a mode that does not run, nor
// believe an edit of it does something: the lab keeps its values equal to
// svcproxy's flags, and an annotation says that nothing reads it.

// labConfigMapNote is the annotation that says so.
const labConfigMapNote = "svclab.svcproxy.io/not-read"

// labConfigMapWhy is its value.
const labConfigMapWhy = "Nothing reads this ConfigMap in svclab's control-plane lab: svclab runs svcproxy " +
	"itself in the node, with flags, and keeps these values equal to them. Editing it changes nothing; " +
	"`svclab mode MODE` restarts svcproxy in another mode and writes the new mode here. " +
	"On the real node (svclab up --kubelet) svcproxy runs as a DaemonSet that reads its ConfigMap."

// labConfigMapPatch is the merge patch that makes the ConfigMap say what
// svcproxy runs with: mode, hybrid's kernel path (its default, nftables,
// when offload is ""), and the pod ranges of --cluster-cidr.
func labConfigMapPatch(mode, offload, clusterCIDRs string) ([]byte, error) {
	return json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{labConfigMapNote: labConfigMapWhy}},
		"data":     map[string]string{"mode": mode, "offload": cmp.Or(offload, "nftables"), "cluster-cidr": clusterCIDRs},
	})
}

// syncLabConfigMap writes what svcproxy runs with into the control-plane
// lab's ConfigMap kube-system/svcproxy (see labConfigMapPatch).
func (c *Cluster) syncLabConfigMap(ctx context.Context, mode, offload string) error {
	patch, err := labConfigMapPatch(mode, offload, c.daemons.clusterCIDRs())
	if err != nil {
		return err
	}
	if _, err := c.KubectlOut(ctx, nil, "-n", "kube-system", "patch", "configmap", "svcproxy", "--type", "merge", "-p", string(patch)); err != nil {
		return fmt.Errorf("the lab's ConfigMap kube-system/svcproxy: %w", err)
	}
	return nil
}
