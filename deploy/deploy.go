package deploy

import (
	"embed"
	"io/fs"
	"os"
	"path/filepath"
)

// Files are the kustomize directories rbac, base, kind, lab, realnode,
// kubeadm and coredns, as in the repository.
//
//go:embed rbac base kind lab realnode kubeadm coredns
var Files embed.FS

// WriteTo copies Files into dir (dir/rbac, dir/base, ...), where
// `kubectl apply -k dir/lab` reads them.
func WriteTo(dir string) error {
	return fs.WalkDir(Files, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		target := filepath.Join(dir, filepath.FromSlash(path))
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := Files.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
}
