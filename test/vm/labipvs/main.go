// Command labipvs is `make lab-ipvs`: it boots test/vm's VM (Debian's kernel, which
// has IPVS, under QEMU) and runs `svclab demo` inside, so the demo's IPVS step runs
// on a kernel that has IPVS, and prints the demo as it goes. With --shell
// (`make lab-ipvs-shell`) it gives a root shell in the VM instead, with svclab,
// svcproxy, clusterdns, ipvsadm, ipset and iptables on PATH, for
// tutorials/07-ipvs.md.
//
// It needs no root on this machine: the lab's namespaces, rules and virtual
// servers are all inside the VM, which has no network device.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/svcproxy/svcproxy/test/vm"
)

func main() {
	shell := flag.Bool("shell", false, "a shell in the VM instead of the demo")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: go run ./test/vm/labipvs [--shell]\n\nBoots a Debian kernel with IPVS under QEMU and runs svclab demo in it (or a shell).\n")
	}
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *shell)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "lab-ipvs: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, shell bool) error {
	// The kernel's download (once, ~15 s), the builds (seconds when cached), the
	// boot, and the demo: a few minutes under TCG. A shell stays as long as it is used.
	if !shell {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 20*time.Minute)
		defer cancel()
	}
	cache, err := vm.DefaultCacheDir()
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "lab-ipvs: the kernel (cached in %s)...\n", cache)
	k, err := vm.FetchKernel(ctx, cache)
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "svclab-vm-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	fmt.Fprintln(os.Stderr, "lab-ipvs: building svclab, svcproxy and clusterdns for the VM...")
	if err := vm.BuildLab(ctx, work); err != nil {
		return err
	}
	command := vm.DemoCommand
	if shell {
		command = vm.ShellCommand
	}
	g, err := vm.NewLabGuest(work, command...)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "lab-ipvs: booting %s under QEMU (TCG: slower than this machine)...\n", k.Version)
	if shell {
		return vm.RunInteractive(ctx, k, g, work, os.Stdin, os.Stdout, os.Stderr)
	}
	var out vm.GuestOutput
	res, err := vm.Run(ctx, k, g, work, func(l string) {
		if out.Line(l) {
			fmt.Println(l)
		}
	})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("svclab demo in the VM exited with status %d", res.ExitCode)
	}
	return nil
}
