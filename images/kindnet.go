package images

import (
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// KindnetRef is the image of kindnet (images/kindnet), the kind node image's
// pod network in place of kindnetd, whose source the module proxy does not
// serve; kind's CNI manifest in the node image names it.
const KindnetRef = "svcproxy.test/kindnetd:dev"

// Kindnet is kindnet's image: the program alone, static, at kindnetd's path.
func Kindnet() Spec {
	return Spec{Ref: KindnetRef, File: "kindnetd.tar", Needs: []string{"kindnet"}, build: kindnet}
}

func kindnet(cfg Config) (v1.Image, error) {
	root := base()
	if err := addStatic(root, cfg.Kindnet, "/bin/kindnetd"); err != nil {
		return nil, err
	}
	return root.Image(v1.Config{
		Entrypoint: []string{"/bin/kindnetd"},
		Labels:     labels("kindnet", "kindnetd's CNI configuration and routes (images/kindnet)"),
	})
}
