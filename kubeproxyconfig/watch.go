package kubeproxyconfig

import (
	"context"
	"errors"
	"fmt"

	"github.com/fsnotify/fsnotify"
)

// ErrFileUpdated is what FileWatch.Wait returns when the configuration file
// was written or renamed: kube-proxy's words (Options.eventHandler,
// cmd/kube-proxy/app/options.go of v1.37.2), so that the process exits and
// its pod's container restarts with the new file.
var ErrFileUpdated = errors.New("content of the proxy server's configuration file was updated")

// FileWatch watches the --config file as kube-proxy 1.37 does
// (Options.initWatcher): one inotify watch on the file's path, which, like
// every inotify watch, follows a symlink to the file it names at the time.
//
// A write to that file or a rename of it ends the watch with ErrFileUpdated;
// any other event (a chmod, a removal) is let pass, as kube-proxy lets it
// pass. That is why editing the kube-proxy ConfigMap restarts neither
// kube-proxy nor svcproxy: the kubelet updates a ConfigMap volume by writing
// a new directory and swapping the ..data symlink, and the file watched, in
// the old directory, is removed, never written. The new file is read by the
// next start: delete the pods.
type FileWatch struct {
	file string
	w    *fsnotify.Watcher
}

// WatchFile starts watching file. An error (no such file, no inotify
// instance left) stops svcproxy at start, as it stops kube-proxy.
func WatchFile(file string) (*FileWatch, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", file, err)
	}
	if err := w.Add(file); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("watch %s: %w", file, err)
	}
	return &FileWatch{file: file, w: w}, nil
}

// Wait returns ErrFileUpdated (wrapped with the file's name) when the file
// is written or renamed, the watcher's error when inotify reports one (its
// queue overflowed: a write may have been missed), and nil when ctx ends. It
// closes the watch before it returns.
func (fw *FileWatch) Wait(ctx context.Context) error {
	defer fw.Close()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-fw.w.Events:
			if !ok {
				return nil
			}
			if ev.Has(fsnotify.Write) || ev.Has(fsnotify.Rename) {
				return fmt.Errorf("%s: %w", fw.file, ErrFileUpdated)
			}
		case err, ok := <-fw.w.Errors:
			if !ok {
				return nil
			}
			return fmt.Errorf("watch %s: %w", fw.file, err)
		}
	}
}

// Close ends the watch without waiting: for a start that fails before Wait
// runs.
func (fw *FileWatch) Close() { _ = fw.w.Close() }
