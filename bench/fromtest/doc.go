// Command fromtest turns the output of `go test -bench` into the JSON report
// that bench/plot draws (bench/report), for benchmarks that keep no report of
// their own: it reads go test's output on standard input, copies it to
// standard output as it comes, and at the end writes the report: each
// benchmark's figures (the mean per unit over its -count lines) and the ratios
// asked for with -ratio.
//
//	go test -run '^$' -bench OneServiceChange -benchtime 500x -count 5 ./offload/socklb/ |
//		go run ./bench/fromtest -bench socklb -o docs/benchmarks/socklb.json \
//		-command "go test -run '^$' -bench OneServiceChange -benchtime 500x -count 5 ./offload/socklb/" \
//		-ratio 'one Service change at 10,000 Services, time;kernel / Fake;OneServiceChange/kernel/services=10000;OneServiceChange/fake/services=10000;ns/op'
//
// A -ratio is "group;metric;numerator;denominator;unit": the benchmarks are
// named as go test prints them without "Benchmark" and the -GOMAXPROCS
// suffix. The load average is read when fromtest starts (with go test, in one
// pipeline) and when its input ends. A run that printed FAIL, or that
// measured no ratio asked for, writes no report and exits 1: in a pipeline
// the exit status is the last command's, so a failed benchmark still fails
// make bench.
package main
