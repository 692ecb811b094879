package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"testing"

	"github.com/svcproxy/svcproxy/modes"
)

// TestHelperSvcproxy is not a test: TestIPVSFallback runs the test binary as
// svcproxy inside the node namespace (os/exec's helper-process pattern), so no
// build step is needed.
func TestHelperSvcproxy(t *testing.T) {
	if os.Getenv("SVCPROXY_HELPER") != "1" {
		t.Skip("the svcproxy process of TestIPVSFallback")
	}
	args := os.Args[slices.Index(os.Args, "--")+1:]
	cfg, err := parseFlags(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "svcproxy:", err)
		os.Exit(2)
	}
	var w io.Writer = os.Stderr
	if path := os.Getenv("SVCPROXY_HELPER_LOG"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "svcproxy:", err)
			os.Exit(2)
		}
		w = io.MultiWriter(os.Stderr, f)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if cfg.Cleanup {
		if err := modes.Cleanup(ctx, cfg.modes(slog.New(slog.DiscardHandler))); err != nil {
			fmt.Fprintln(os.Stderr, "svcproxy: cleanup:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if err := run(ctx, cfg, slog.New(slog.NewTextHandler(w, nil))); err != nil {
		fmt.Fprintln(os.Stderr, "svcproxy:", err)
		os.Exit(1)
	}
	os.Exit(0)
}
