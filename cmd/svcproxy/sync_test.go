package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/service"
)

// syncFunc is a dataplane's Sync alone.
type syncFunc func(ctx context.Context) error

func (f syncFunc) Sync(ctx context.Context, _ *service.Snapshot) error { return f(ctx) }

// TestSyncTo: a failed sync is a warning, but one the shutdown cut short
// (the error comes once ctx has ended) is not: svcproxy stopping in the
// middle of a sync, which the ipvs mode's long syncs made likely, logged
// "sync incomplete ... context canceled" at every SIGTERM.
func TestSyncTo(t *testing.T) {
	snap := service.NewSnapshot(nil, nil)
	tests := []struct {
		name     string
		sync     syncFunc
		shutdown bool // ctx is cancelled while Sync runs
		synced   bool
		warn     string // in the log at WARN, or "" for no WARN line
	}{
		{name: "synced", sync: func(context.Context) error { return nil }, synced: true},
		{name: "failed", sync: func(context.Context) error { return errors.New("iptables-restore: exit status 4") },
			warn: "iptables-restore: exit status 4"},
		{name: "cut short by the shutdown", shutdown: true, sync: func(ctx context.Context) error {
			<-ctx.Done()
			return fmt.Errorf("ipvs: add virtual server: %w", ctx.Err())
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logged bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			sync := tt.sync
			if tt.shutdown {
				sync = func(ctx context.Context) error {
					cancel() // SIGTERM arrives while the dataplane syncs
					return tt.sync(ctx)
				}
			}
			if got := syncTo(ctx, sync, snap, log); got != tt.synced {
				t.Errorf("syncTo = %v, want %v", got, tt.synced)
			}
			var warns []string
			for line := range strings.SplitSeq(logged.String(), "\n") {
				if strings.Contains(line, "level=WARN") {
					warns = append(warns, line)
				}
			}
			switch {
			case tt.warn == "" && len(warns) > 0:
				t.Errorf("warned: %q", warns)
			case tt.warn != "" && (len(warns) != 1 || !strings.Contains(warns[0], tt.warn)):
				t.Errorf("warnings %q, want one naming %q", warns, tt.warn)
			}
			if tt.shutdown && !strings.Contains(logged.String(), "cut short by the shutdown") {
				t.Errorf("no debug line for the cut-short sync; log:\n%s", logged.String())
			}
		})
	}
}
