package vm

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
)

// archive is the content of an initramfs: guest path -> entry. Parent directories
// are added when it is written.
type archive map[string]entry

type entry struct {
	mode   uint32 // file type and permission bits, as in stat(2)
	src    string // host file to copy (regular files)
	data   []byte // literal content (regular files without src)
	target string // symlink target
}

// Type bits of st_mode (inode(7)).
const (
	modeDir     = 0o040000
	modeRegular = 0o100000
	modeSymlink = 0o120000
)

func (a archive) file(guest, src string, perm uint32) {
	a[guest] = entry{mode: modeRegular | perm, src: src}
}

func (a archive) data(guest string, data []byte, perm uint32) {
	a[guest] = entry{mode: modeRegular | perm, data: data}
}

func (a archive) symlink(guest, target string) {
	a[guest] = entry{mode: modeSymlink | 0o777, target: target}
}

func (a archive) dir(guest string) { a[guest] = entry{mode: modeDir | 0o755} }

// writeTo writes the archive in the "newc" format the kernel unpacks
// (Documentation/driver-api/early-userspace/buffer-format.rst), directories first.
func (a archive) writeTo(w io.Writer) error {
	for p := range a {
		for d := path.Dir(p); d != "/" && d != "."; d = path.Dir(d) {
			if _, ok := a[d]; !ok {
				a.dir(d)
			}
		}
	}
	names := make([]string, 0, len(a))
	for p := range a {
		names = append(names, p)
	}
	sort.Strings(names) // a parent sorts before its children
	bw := bufio.NewWriterSize(w, 1<<20)
	for i, p := range names {
		if err := writeEntry(bw, uint32(i+1), strings.TrimPrefix(p, "/"), a[p]); err != nil {
			return fmt.Errorf("initramfs %s: %w", p, err)
		}
	}
	if err := writeHeader(bw, 0, "TRAILER!!!", 0, 0); err != nil {
		return err
	}
	return bw.Flush()
}

func writeEntry(w *bufio.Writer, ino uint32, name string, e entry) error {
	var body []byte
	switch e.mode &^ 0o7777 {
	case modeSymlink:
		body = []byte(e.target)
	case modeRegular:
		body = e.data
		if e.src != "" {
			b, err := os.ReadFile(e.src)
			if err != nil {
				return err
			}
			body = b
		}
	}
	if err := writeHeader(w, ino, name, e.mode, len(body)); err != nil {
		return err
	}
	w.Write(body)
	return pad(w, len(body))
}

func writeHeader(w *bufio.Writer, ino uint32, name string, mode uint32, size int) error {
	nlink := 1
	if mode&^0o7777 == modeDir {
		nlink = 2
	}
	// magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor, devminor,
	// rdevmajor, rdevminor, namesize (with its NUL), check
	fmt.Fprintf(w, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, mode, 0, 0, nlink, 0, size, 0, 0, 0, 0, len(name)+1, 0)
	w.WriteString(name)
	w.WriteByte(0)
	return pad(w, 110+len(name)+1)
}

// pad aligns to 4 bytes, as newc wants after each header+name and each body.
func pad(w *bufio.Writer, n int) error {
	if r := n % 4; r != 0 {
		w.Write(make([]byte, 4-r))
	}
	return nil
}
