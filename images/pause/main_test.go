package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/netnstest"
)

// build compiles pause as the image has it, static.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "pause")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// start runs pause and waits for its first line on stderr, which it writes
// once its signal handlers are in place.
func start(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(stderr).ReadString('\n')
	if err != nil {
		t.Fatalf("pause's first line: %v", err)
	}
	return line
}

func TestVersion(t *testing.T) {
	out, err := exec.Command(build(t), "-v").Output()
	if err != nil || !strings.HasPrefix(string(out), "pause.go "+version) {
		t.Errorf("pause -v = %q, %v; want pause.go %s", out, err, version)
	}
}

// TestSignals checks that SIGINT and SIGTERM end pause with status 0, as
// pause.c's sigdown does: the kubelet stops a sandbox with SIGTERM.
func TestSignals(t *testing.T) {
	bin := build(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		cmd := exec.Command(bin)
		if line := start(t, cmd); !strings.Contains(line, "should be the first process") {
			t.Errorf("first line %q, want the warning of a pause that is not PID 1", line)
		}
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Errorf("pause after %v: %v, want exit status 0", sig, err)
		}
	}
}

// TestReap runs pause as PID 1 of a new PID namespace and leaves an orphan
// in it (a shell that starts `sleep` in the background and exits): the
// orphan is reparented to pause, which must reap it once it exits. Without
// reaping it would stay a zombie child of pause, and the wait would end in
// the test's failure.
func TestReap(t *testing.T) {
	netnstest.RequireRoot(t, "nsenter", "sh", "sleep")
	cmd := exec.Command(build(t))
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	if line := start(t, cmd); !strings.Contains(line, "running as PID 1") {
		t.Fatalf("first line %q, want pause running as PID 1", line)
	}
	pid := cmd.Process.Pid
	out, err := exec.Command("nsenter", "-t", strconv.Itoa(pid), "-p", "--", "sh", "-c", "sleep 0.2 & echo started").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "started") {
		t.Fatalf("nsenter: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		kids := children(t, pid)
		if len(kids) == 0 {
			break // the orphan came and was reaped (or had exited before the shell)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pause (pid %d) still has children %v: it does not reap", pid, kids)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("pause as PID 1 after SIGTERM: %v, want exit status 0", err)
	}
}

// children lists the processes whose parent is pid, with their state
// ("12345 Z"), from /proc/*/stat.
func children(t *testing.T, pid int) []string {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var kids []string
	for _, s := range stats {
		b, err := os.ReadFile(s)
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after ")".
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) >= 2 && f[1] == strconv.Itoa(pid) {
			kids = append(kids, filepath.Base(filepath.Dir(s))+" "+f[0])
		}
	}
	return kids
}
