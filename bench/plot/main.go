package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"

	"github.com/svcproxy/svcproxy/bench/report"
)

func main() {
	out := flag.String("o", "", "write the SVG to this `FILE` (default: standard output)")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: plot [-o FILE] REPORT.json...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if err := run(flag.Args(), *out); err != nil {
		fmt.Fprintln(os.Stderr, "plot:", err)
		os.Exit(1)
	}
}

func run(files []string, out string) error {
	if len(files) == 0 {
		return fmt.Errorf("no report given (the JSON of a benchmark's -json flag)")
	}
	var reports []report.Report
	for _, f := range files {
		r, err := report.Read(f)
		if err != nil {
			return err
		}
		reports = append(reports, r)
	}
	var svg bytes.Buffer
	if err := writeSVG(&svg, reports); err != nil {
		return err
	}
	if out == "" {
		_, err := os.Stdout.Write(svg.Bytes())
		return err
	}
	return os.WriteFile(out, svg.Bytes(), 0o644)
}
