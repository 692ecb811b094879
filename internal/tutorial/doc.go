// Package tutorial reads the lab commands out of tutorials/NN-topic.md and
// checks a command's output against the output the tutorial shows, so that a
// tutorial cannot drift from the code: test/lab runs every tutorial against a
// fresh lab, and test/vm runs the ones that need a kernel this machine lacks.
//
// The format is the one a reader sees:
//
//   - a command is a line starting with "svclab " in a ```sh block (the other
//     lines there, like `go build`, are for the reader's machine); a line
//     ending in a backslash continues on the next;
//   - a command whose line ends in the shell comment "# fails" (or
//     "# fails: the connection is refused") must exit non-zero: sh ignores
//     the comment, the reader sees it, and the runner checks both the exit
//     status and the output;
//   - a ```text block is output the command just before it must print: its
//     lines must appear in the command's output, in order and exactly, but
//     for what the block marks as varying (match.go): a <word> in angle
//     brackets stands for a value a run may change (<port>, <n>, <time>),
//     a "..." line for any lines, "..." within a line for any text there;
//     blanks and the lengths of bars are free;
//   - a line "<!-- needs: ipvs -->" (outside blocks) names what the
//     tutorial's kernel must have; a runner without it skips the tutorial and
//     says where it runs instead.
package tutorial
