package lab

import _ "embed"

// Manifests is the lab's cluster: Services and hand-written EndpointSlices
// for the hosts of DefaultPlan. svcproxy and clusterdns read it as their
// --services file.
//
//go:embed manifests.yaml
var Manifests []byte
