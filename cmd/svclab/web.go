package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"time"

	"github.com/svcproxy/svcproxy/lab"
	"github.com/svcproxy/svcproxy/lab/web"
)

const webAbout = `
Serves one page about the running lab, live: its hosts; on a lab with a
control plane its nodes, each with the pods bound to it, as the API server has
them; each Service port with the path it takes now (userspace or the kernel),
its endpoints and their
conditions and the connections each path counted; hybrid's timeline (new
connections per second by path, each promotion and demotion marked); a packet
traced hop by hop through the node's rules (svclab trace); and controls that
run svclab traffic, svclab pod and svclab mode, each showing the command.

It listens on loopback only (127.0.0.1:8088) unless --listen says otherwise:
the controls change the lab and svclab runs as root, so keep it there, and
reach it from another machine through an SSH tunnel
(ssh -L 8088:127.0.0.1:8088 HOST). It answers only requests addressed to an IP
address or localhost, and refuses controls posted from another web site. Open the
address it prints in a browser.`

func cmdWeb(ctx context.Context, cfg lab.Config, args []string) error {
	fs := newFlags(cfg, "svclab web [--listen ADDR]", webAbout)
	listen := fs.String("listen", "127.0.0.1:8088", "serve on `ADDR` (loopback by default: the controls change the lab)")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	quiet := cfg
	quiet.Stdout, quiet.Progress = io.Discard, false // TraceReport also prints
	l, err := lab.New(quiet)
	if err != nil {
		return err
	}
	if _, err := l.Mode(); err != nil {
		return fmt.Errorf("no lab is up (svclab up first): %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	global := globalArgs(cfg)
	srv := web.NewServer(web.Config{Lab: l, Run: runSelf(self, global), Prefix: commandPrefix(global)})
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	fmt.Fprintf(cfg.Stdout, "svclab web: serving http://%s/ (Ctrl-C stops it)\n", ln.Addr())
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go srv.Run(ctx)
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer scancel()
		_ = hs.Shutdown(sctx) // event streams never end by themselves: Close after the timeout
		_ = hs.Close()
	}()
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// globalArgs are the global flags svclab was given that the controls'
// commands need too.
func globalArgs(cfg lab.Config) []string {
	var args []string
	if cfg.StateDir != "" && cfg.StateDir != lab.DefaultStateDir {
		args = append(args, "--state", cfg.StateDir)
	}
	if cfg.BinDir != "" {
		args = append(args, "--bin", cfg.BinDir)
	}
	if kapiDir != nil && *kapiDir != "" {
		args = append(args, "--kapi", *kapiDir)
	}
	return args
}

// commandPrefix is how the page writes the commands: "svclab" and the
// global flags, as a learner would type them.
func commandPrefix(global []string) string {
	p := "svclab"
	for _, a := range global {
		p += " " + a
	}
	return p
}

// runSelf runs this svclab binary with the global flags and args, and
// returns what it printed (standard output and error together, as a
// terminal shows them).
func runSelf(self string, global []string) web.Runner {
	return func(ctx context.Context, args []string) (string, error) {
		cmd := exec.CommandContext(ctx, self, append(append([]string(nil), global...), args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
}
