package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

func main() {
	args := os.Args[1:]
	if err := rewrite(args); err != nil {
		fmt.Fprintln(os.Stderr, "runc-capbound:", err)
		os.Exit(1)
	}
	runc, err := realRunc()
	if err != nil {
		fmt.Fprintln(os.Stderr, "runc-capbound:", err)
		os.Exit(1)
	}
	// exec, not a child: containerd and the shims wait on runc's own
	// process, its exit status and its signals.
	err = syscall.Exec(runc, append([]string{runc}, args...), os.Environ())
	fmt.Fprintf(os.Stderr, "runc-capbound: exec %s: %v\n", runc, err)
	os.Exit(1)
}

// rewrite clamps the capabilities of the file the command reads, if any.
func rewrite(args []string) error {
	inv := parse(args)
	if inv.file == "" {
		return nil
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return err
	}
	b, err := parseBounding(status)
	if err != nil {
		return fmt.Errorf("/proc/self/status: %w", err)
	}
	removed, err := clampFile(inv.file, inv.capsAt, b)
	if err != nil {
		return fmt.Errorf("runc %s: %s: %w", inv.command, inv.file, err)
	}
	if inv.debug && len(removed) > 0 {
		fmt.Fprintf(os.Stderr, "runc-capbound: removed %s from %s: not in this machine's bounding set\n",
			strings.Join(removed, ", "), inv.file)
	}
	return nil
}

// clampFile rewrites file with the capabilities b does not allow removed,
// through a file beside it renamed into place, and returns their names.
func clampFile(file string, capsAt []string, b bounding) ([]string, error) {
	doc, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	out, removed, err := clamp(doc, capsAt, b)
	if err != nil || out == nil {
		return nil, err
	}
	fi, err := os.Stat(file)
	if err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".capbound-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name()) // gone after the rename
	if _, err := tmp.Write(out); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Chmod(fi.Mode().Perm()); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	return removed, os.Rename(tmp.Name(), file)
}

// invocation is what rewrite needs of runc's command line.
type invocation struct {
	command string   // create, run, exec, ...
	file    string   // the JSON file holding the capabilities; "" for none
	capsAt  []string // where in it
	debug   bool     // runc's --debug
}

// runc's global flags that take a value (runc --help, 1.1 and later):
// the word after one of them is not the command.
var globalValued = map[string]bool{"root": true, "log": true, "log-format": true, "criu": true, "rootless": true}

// parse finds the command and the file it reads capabilities from. runc's
// flags are urfave/cli's: -name and --name alike, the value after "=" or in
// the next word, flags before the arguments.
func parse(args []string) invocation {
	var inv invocation
	i := 0
	for ; i < len(args); i++ {
		name, hasValue, ok := flagName(args[i])
		if !ok {
			break
		}
		if name == "debug" {
			inv.debug = true
		}
		if globalValued[name] && !hasValue {
			i++
		}
	}
	if i >= len(args) {
		return inv
	}
	inv.command = args[i]
	var want []string // the flag naming the file, its long and short names
	switch inv.command {
	case "create", "run":
		want, inv.capsAt = []string{"bundle", "b"}, []string{"process", "capabilities"}
		inv.file = "config.json" // no --bundle: the working directory is the bundle
	case "exec":
		want, inv.capsAt = []string{"process", "p"}, []string{"capabilities"}
	default:
		return inv
	}
	rest := args[i+1:]
	for j := 0; j < len(rest); j++ {
		name, hasValue, ok := flagName(rest[j])
		if !ok || name != want[0] && name != want[1] {
			continue
		}
		value := ""
		if hasValue {
			_, value, _ = strings.Cut(rest[j], "=")
		} else if j+1 < len(rest) {
			value = rest[j+1]
		}
		if inv.command == "exec" {
			inv.file = value
		} else {
			inv.file = filepath.Join(value, "config.json")
		}
		break
	}
	return inv
}

// flagName returns the name of a flag word ("--bundle=x" -> "bundle", true).
func flagName(arg string) (name string, hasValue, ok bool) {
	if !strings.HasPrefix(arg, "-") || arg == "-" || arg == "--" {
		return "", false, false
	}
	name = strings.TrimLeft(arg, "-")
	name, _, hasValue = strings.Cut(name, "=")
	return name, hasValue, true
}

// realRunc is $RUNC_CAPBOUND_RUNC, or the first runc on PATH that is not
// this program (which may be installed as "runc" itself).
func realRunc() (string, error) {
	if p := os.Getenv("RUNC_CAPBOUND_RUNC"); p != "" {
		return p, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	selfInfo, err := os.Stat(self)
	if err != nil {
		return "", err
	}
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, "runc")
		fi, err := os.Stat(p)
		if err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 || os.SameFile(fi, selfInfo) {
			continue
		}
		return p, nil
	}
	return "", errors.New("no runc on PATH besides this program (set RUNC_CAPBOUND_RUNC)")
}
