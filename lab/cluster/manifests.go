package cluster

import _ "embed"

// Manifests is the lab's cluster: Services and hand-written EndpointSlices
// for the hosts of topology.DefaultPlan. svcproxy and clusterdns read it as their
// --services file.
//
//go:embed manifests.yaml
var Manifests []byte

// Objects is the control-plane lab's cluster: the same Services as Manifests
// and two StatefulSets, web and db, whose pods svclab runs as the kubelet
// would. `svclab up --control-plane` applies it with kubectl.
//
//go:embed cluster.yaml
var Objects []byte
