package image

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"golang.org/x/sys/unix"
)

// WriteArchive writes img, named ref, to a tar file at path: an OCI image
// layout (oci-layout, index.json, blobs/sha256/...) whose index names the
// image for containerd (io.containerd.image.name) and for OCI tools
// (org.opencontainers.image.ref.name), plus Docker's manifest.json pointing
// at the same blobs. The file is written next to path and renamed into place.
func WriteArchive(path string, img v1.Image, ref string) error {
	return WriteImages(path, Named{Ref: ref, Image: img})
}

// Named is an image and its name.
type Named struct {
	Ref   string
	Image v1.Image
}

// WriteImages is WriteArchive for several images in one archive: their
// blobs once each (images that share a layer store it once), each named in
// the index and in manifest.json.
func WriteImages(path string, images ...Named) error {
	dir, err := os.MkdirTemp("", "svcproxy-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("oci layout: %w", err)
	}
	var entries []any
	for _, n := range images {
		tag, err := name.NewTag(n.Ref)
		if err != nil {
			return fmt.Errorf("image name %q: %w", n.Ref, err)
		}
		if err := lp.AppendImage(n.Image, layout.WithAnnotations(map[string]string{
			"io.containerd.image.name":          tag.Name(),
			"org.opencontainers.image.ref.name": tag.TagStr(),
		})); err != nil {
			return fmt.Errorf("oci layout: %w", err)
		}
		entry, err := dockerManifest(n.Image, tag)
		if err != nil {
			return err
		}
		entries = append(entries, entry)
	}
	manifest, err := json.Marshal(entries)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), manifest, 0o644); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := tarDir(dir, tmp); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

// dockerManifest is `docker save`'s manifest.json entry for one image whose
// blobs are in the OCI layout's blobs/ directory.
func dockerManifest(img v1.Image, tag name.Tag) (any, error) {
	cfg, err := img.ConfigName()
	if err != nil {
		return nil, err
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	entry := struct {
		Config   string
		RepoTags []string
		Layers   []string
	}{Config: blobPath(cfg), RepoTags: []string{tag.Name()}}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return nil, err
		}
		entry.Layers = append(entry.Layers, blobPath(d))
	}
	return entry, nil
}

func blobPath(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

// tarDir writes the files under dir to a tar file, sorted (WalkDir's order).
func tarDir(dir, path string) error {
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(out)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		h.ModTime, h.Uid, h.Gid, h.Uname, h.Gname = epoch, 0, 0, "", ""
		if d.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// Unpack writes img's root filesystem (its layers flattened) into dir, which
// must be empty or missing: what a container runtime would mount as /.
// Entries that would land outside dir are refused. A regular file's extended
// attributes (file capabilities) are set as containerd sets them.
func Unpack(img v1.Image, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("unpack: %w", err)
		}
		name := filepath.Clean("/" + h.Name)
		target := filepath.Join(dir, name)
		if !strings.HasPrefix(target, filepath.Clean(dir)+string(os.PathSeparator)) {
			return fmt.Errorf("unpack: %s: outside the root", h.Name)
		}
		mode := os.FileMode(h.Mode).Perm()
		if h.Mode&0o1000 != 0 {
			mode |= os.ModeSticky
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
			if err := os.Chmod(target, mode); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			if err := os.Symlink(h.Linkname, target); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			if err := setXattrs(target, h); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unpack: %s: tar entry type %q not handled", h.Name, h.Typeflag)
		}
	}
}

// setXattrs sets the extended attributes a tar header carries as PAX
// records (SCHILY.xattr.NAME), as GNU tar --xattrs and containerd do.
func setXattrs(target string, h *tar.Header) error {
	for k, v := range h.PAXRecords {
		name, ok := strings.CutPrefix(k, "SCHILY.xattr.")
		if !ok {
			continue
		}
		if err := unix.Lsetxattr(target, name, []byte(v), 0); err != nil {
			return fmt.Errorf("unpack: %s: xattr %s: %w", h.Name, name, err)
		}
	}
	return nil
}
