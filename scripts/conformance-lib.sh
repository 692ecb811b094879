# What scripts/conformance.sh (the lab's clusters) and
# scripts/conformance-kind.sh (kind's) share, sourced by both from the
# repository's root: the run of several modes, the count of the focused tests
# and the summary of e2e.test's log. Each function's first argument is the
# name its messages start with ("conformance", "conformance-kind").

# conformance_modes NAME OUT_PREFIX: runs the calling script ($0) once per
# mode of MODE (MODE=one of them), its output shown and kept in
# OUT_PREFIX<mode>.out and its exit status in OUT_PREFIX<mode>.rc; then
# prints the sum of the modes' summary lines. Returns 1 when a mode failed
# or ended without a summary.
conformance_modes() {
	who=$1 prefix=$2
	total_p=0 total_f=0 total_s=0 modes_rc=0
	for m in $MODE; do
		out=$prefix$m
		{ MODE=$m sh "$0"; echo $? >"$out.rc"; } 2>&1 | tee "$out.out"
		[ "$(cat "$out.rc")" = 0 ] || modes_rc=1
		set -- $(sed -n -E 's/^([0-9]+) passed, ([0-9]+) failed, ([0-9]+) skipped$/\1 \2 \3/p' "$out.out")
		if [ $# -ne 3 ]; then
			echo "$who: mode $m ended without a summary" >&2
			modes_rc=1
			continue
		fi
		total_p=$((total_p + $1)) total_f=$((total_f + $2)) total_s=$((total_s + $3))
	done
	echo "$who: modes $MODE together:"
	echo "$total_p passed, $total_f failed, $total_s skipped"
	return "$modes_rc"
}

# conformance_focused: the number of tests FOCUS selects, counted by a dry
# run of E2E_TEST (under a second): the summary's "N skipped" is those of them
# that did not run, by SKIP or by the test's own check at run time, not the
# thousands outside the focus.
conformance_focused() {
	"$E2E_TEST" --provider=local --ginkgo.dry-run --ginkgo.no-color \
		--ginkgo.focus="$FOCUS" 2>/dev/null | sed -n -E 's/^Ran ([0-9]+) of .*/\1/p' | tail -1
}

# conformance_summary NAME LOG RC FOCUSED: prints Ginkgo's "Ran N of M Specs"
# line and the failed tests from LOG, then the line "N passed, N failed, N
# skipped" (skipped: of the FOCUSED tests). Without Ginkgo's summary in LOG
# (e2e.test's exit status RC; 124 is the timeout's) it says so and returns 1.
# Ginkgo's summary is "SUCCESS! -- 23 Passed | 0 Failed | 0 Pending | 3183
# Skipped".
conformance_summary() {
	who=$1 log=$2 e2e_rc=$3 focused=$4
	grep -a -E '^Ran [0-9]+ of [0-9]+ Specs' "$log" | tail -1 || true
	grep -a -E -A40 '^Summarizing [0-9]+ Failure' "$log" | grep -a '\[FAIL\]' || true
	line=$(grep -a -E -- '-- [0-9]+ Passed \| [0-9]+ Failed \| [0-9]+ Pending \| [0-9]+ Skipped' "$log" | tail -1 || true)
	if [ -z "$line" ]; then
		echo "$who: no e2e summary (exit status $e2e_rc; timeout is 124): see $log" >&2
		return 1
	fi
	passed=$(echo "$line" | sed -E 's/.*-- ([0-9]+) Passed.*/\1/')
	failed=$(echo "$line" | sed -E 's/.*\| ([0-9]+) Failed.*/\1/')
	echo "$passed passed, $failed failed, $((focused - passed - failed)) skipped"
}
