// Package guest holds the IPVS tests that run on a real kernel with IPVS: inside the
// VM that test/vm boots (make test-ipvs), or on any host whose kernel has IPVS. Each
// test builds its own network namespaces (a client, a director with IPVS, backends),
// sends real TCP traffic between them and removes them; elsewhere the tests skip.
package guest
