package vm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// ansi matches the terminal escapes SeaBIOS and the kernel send to the console
// (reset, clear screen, wrap mode), so markers start their lines.
var ansi = regexp.MustCompile(`\x1b(c|\[[0-9;?]*[A-Za-z])`)

// Result is what a boot produced.
type Result struct {
	// ExitCode is the guest command's exit code, -1 when the console had no result
	// line (a kernel panic, a hang cut by the timeout, a broken /init).
	ExitCode int
	// Console is every line of the serial console, carriage returns removed.
	Console []string
	// Boot is the time from QEMU's start to /init's ready line (kernel boot and module
	// loading); Total until QEMU exited.
	Boot, Total time.Duration
}

// Run builds the initramfs for g in workDir, boots k under QEMU with TCG and waits for
// the guest to power off or ctx to end. line, if not nil, sees each console line as
// it arrives. The error is about running QEMU; the guest's verdict is Result.ExitCode.
func Run(ctx context.Context, k *Kernel, g Guest, workDir string, line func(string)) (*Result, error) {
	cmd, err := qemu(ctx, k, g, workDir)
	if err != nil {
		return nil, err
	}
	cmd.Stdin = nil // /dev/null: QEMU must not wait on a terminal
	cmd.WaitDelay = 5 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	res := &Result{ExitCode: -1}
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l := ansi.ReplaceAllString(strings.TrimRight(sc.Text(), "\r"), "")
		res.Console = append(res.Console, l)
		if line != nil {
			line(l)
		}
		// SeaBIOS leaves "Booting from ROM.." without a newline: look inside lines.
		if strings.Contains(l, readyMarker) && res.Boot == 0 {
			res.Boot = time.Since(start)
		}
		if i := strings.Index(l, resultMarker+" "); i >= 0 {
			f := strings.Fields(l[i:])
			if n, err := strconv.Atoi(f[1]); err == nil {
				res.ExitCode = n
			}
		}
	}
	err = cmd.Wait()
	res.Total = time.Since(start)
	if ctx.Err() != nil {
		return res, fmt.Errorf("qemu: %w after %s", ctx.Err(), res.Total.Round(time.Second))
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return res, fmt.Errorf("qemu: %w", err)
	}
	if err != nil {
		return res, fmt.Errorf("qemu: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	return res, nil
}

// qemu builds the initramfs for g in workDir and returns the QEMU command that boots
// it with k.
func qemu(ctx context.Context, k *Kernel, g Guest, workDir string) (*exec.Cmd, error) {
	initrd := filepath.Join(workDir, "initramfs.cpio")
	if err := buildInitramfs(k, g, initrd); err != nil {
		return nil, err
	}
	// -accel tcg: /dev/kvm on this kind of host does not run a stock kernel.
	// -no-reboot: a guest panic (panic=-1 reboots at once) ends QEMU.
	return exec.CommandContext(ctx, "qemu-system-x86_64",
		"-accel", "tcg", "-cpu", "max", "-m", "1G", "-nic", "none", "-nographic", "-no-reboot",
		"-kernel", k.Image, "-initrd", initrd,
		"-append", "console=ttyS0 panic=-1 quiet loglevel=3"), nil
}

// RunInteractive boots g like Run, with the serial console on the caller's
// terminal (stdin, stdout, stderr) instead of read line by line: for a shell in the
// guest. QEMU's escape is Ctrl-A: Ctrl-A x ends the VM.
func RunInteractive(ctx context.Context, k *Kernel, g Guest, workDir string, stdin io.Reader, stdout, stderr io.Writer) error {
	cmd, err := qemu(ctx, k, g, workDir)
	if err != nil {
		return err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("qemu: %w", err)
	}
	return nil
}
