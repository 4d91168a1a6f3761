package docs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dkv-io/dkv/internal/testutil"
)

// README.md's CLI tour is run by TestREADMETour as a reader would run it,
// top to bottom in one shell, and each line it prints is compared with
// the README's. The conventions, for whoever edits the tour (every ```sh
// block under the heading tourSection, up to the next heading):
//
//   - The first block is the set-up, exactly `go build -o dkv ./cmd/dkv`
//     and `./dkv serve &`. The test checks it says that but does not run
//     it: it puts the dkv binary testutil builds (from cmd/dkv too) in an
//     empty directory as ./dkv and starts `dkv serve` there itself, on
//     free ports instead of the defaults (taken, maybe, and tests run in
//     parallel), with DKV_ENDPOINTS naming its client port for the tour.
//     Nothing else is set for the tour's commands: DKV_ variables of the
//     test's own environment are dropped.
//   - The other blocks run in document order in one bash, in that
//     directory, so variables and files carry over between them.
//   - A line starting with "#" is output: "# " and a line printed, or
//     "#" alone for an empty line. The other lines are commands; one may
//     take several lines (a heredoc). The output lines under a run of
//     command lines are all that the run prints, stdout and stderr
//     together as a terminal shows them, so a command with none under it
//     prints nothing. A comment after a command is for the reader.
//   - No command may fail (as set -e sees it): one meant to fail shows
//     its exit code with `|| echo "exit $?"`, and the output shows it.
//   - A command run in the background (a line ending in "&") is a run of
//     its own. The lines under it are the first it prints, whenever it
//     prints them (a reader sees them among the next commands' output);
//     it may print more later. Once every block has run the test waits
//     for them (within the script's time limit), then stops the command
//     with SIGTERM, as a reader would with kill.
//   - "..." in an output line stands for anything (globMatch, as in
//     http.md), for what differs between runs on a fresh store: member
//     ids, lock handles, fencing tokens and terms (which are revisions,
//     and a TTL's expiry takes one at its own time), sizes, the version.
//     Everything else must be printed as shown; revisions and lease ids
//     are those of the fresh store the tour starts on.

const (
	readmeFile  = "../README.md"
	tourSection = "A two-minute tour with the CLI"
)

// tourSetup is what the tour's first block runs, which the test does
// itself.
var tourSetup = []string{"go build -o dkv ./cmd/dkv", "./dkv serve &"}

// tourStep is a run of command lines and the output shown under it.
type tourStep struct {
	where string // file:line of the first command line
	cmd   string
	shown []string
	bg    bool
}

// background matches a command line run in the background.
var background = regexp.MustCompile(`(^|[^&])&\s*(#.*)?$`)

// tourSteps splits a block into its steps (see the conventions above).
func tourSteps(file string, f *fence) ([]tourStep, error) {
	var out []tourStep
	var cur *tourStep
	var cmd []string
	flush := func() {
		if cur != nil {
			cur.cmd = strings.Join(cmd, "\n")
			out = append(out, *cur)
		}
		cur, cmd = nil, nil
	}
	for i, line := range strings.Split(strings.TrimSuffix(f.body, "\n"), "\n") {
		where := fmt.Sprintf("%s:%d", file, f.line+1+i)
		switch {
		case strings.HasPrefix(line, "#"):
			if cur == nil {
				return nil, fmt.Errorf("%s: an output line with no command above it", where)
			}
			switch {
			case line == "#":
				cur.shown = append(cur.shown, "")
			case strings.HasPrefix(line, "# "):
				cur.shown = append(cur.shown, line[2:])
			default:
				return nil, fmt.Errorf("%s: an output line is \"# \" and the line printed, or \"#\" alone", where)
			}
		case strings.TrimSpace(line) == "":
			if cur != nil && len(cur.shown) > 0 {
				flush()
			} else if cur != nil {
				cmd = append(cmd, line)
			}
		default:
			bg := background.MatchString(line)
			if cur != nil && (len(cur.shown) > 0 || cur.bg || bg) {
				flush()
			}
			if cur == nil {
				cur = &tourStep{where: where, bg: bg}
			}
			cmd = append(cmd, line)
		}
	}
	flush()
	return out, nil
}

// tourScript is the bash script that runs steps, each step's output in
// dir/N, and the status of any command of step N that fails (as set -e
// would see it, so not one in an || list) in dir/N.failed. It prints
// "step N" as each starts and "ran" once all have run; then it waits for
// a line on stdin before it stops the background commands.
func tourScript(steps []tourStep, dir string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "set -o pipefail\nout=%q\nbg=()\ntrap 'echo $? >>\"$out/$step.failed\"' ERR\n", dir)
	for i, s := range steps {
		fmt.Fprintf(&b, "step=%d\necho \"step $step\"\n{\n%s\n} </dev/null >\"$out/$step\" 2>&1\n", i, s.cmd)
		if s.bg {
			b.WriteString("bg+=($!)\n")
		}
	}
	b.WriteString("trap - ERR\necho ran\nread -r _\nif [ ${#bg[@]} -gt 0 ]; then kill -TERM \"${bg[@]}\"; fi\nwait\n")
	return b.String()
}

// runTour runs steps with bash in dir, with env added to the environment
// (less its DKV_ variables), and returns how their outputs differ from the
// ones shown.
func runTour(t *testing.T, bash string, steps []tourStep, dir string, env []string) []string {
	t.Helper()
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bash, "-c", tourScript(steps, out))
	cmd.Dir = dir
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "DKV_") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	// The background commands are in bash's process group: on a timeout,
	// all of them go.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Should the script end early, its background commands are left
	// behind: whatever is left of the group goes when this returns.
	defer func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }()
	sc := bufio.NewScanner(stdout)
	last := -1 // the step started last
	for sc.Scan() && sc.Text() != "ran" {
		if n, err := strconv.Atoi(strings.TrimPrefix(sc.Text(), "step ")); err == nil {
			last = n
		}
	}
	if sc.Text() != "ran" {
		_ = cmd.Wait()
		at := "before its first step"
		if last >= 0 {
			at = "at " + steps[last].where
		}
		t.Fatalf("the tour's script stopped %s (%v): %v\n%s", at, ctx.Err(), cmd.ProcessState, stderr.String())
	}
	// The background commands print when they print: wait for as many
	// lines as are shown, then compare.
	read := func(i int) []string {
		b, _ := os.ReadFile(filepath.Join(out, strconv.Itoa(i)))
		if len(b) == 0 {
			return nil
		}
		return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for i, s := range steps {
		for s.bg && len(read(i)) < len(s.shown) && ctx.Err() == nil {
			select {
			case <-tick.C:
			case <-ctx.Done():
			}
		}
	}
	_, _ = io.WriteString(stdin, "stop\n")
	_ = stdin.Close()
	if err := cmd.Wait(); err != nil && !errors.Is(err, exec.ErrWaitDelay) {
		t.Errorf("the tour's script: %v (%v)\n%s", err, ctx.Err(), stderr.String())
	}
	var problems []string
	for i, s := range steps {
		got := read(i)
		head := s.cmd
		if l, _, more := strings.Cut(head, "\n"); more {
			head = l + " ..."
		}
		fail := func(format string, args ...any) {
			problems = append(problems, fmt.Sprintf("%s: %s\n  %s\n  printed:\n%s", s.where, head, fmt.Sprintf(format, args...), indent(got)))
		}
		if !s.bg {
			if rc, err := os.ReadFile(filepath.Join(out, strconv.Itoa(i)+".failed")); err == nil {
				fail("a command exited with %s: show a failure with || echo \"exit $?\"", strings.Fields(string(rc))[0])
				continue
			}
			if len(got) != len(s.shown) {
				fail("%d lines printed, %d shown", len(got), len(s.shown))
				continue
			}
		} else if len(got) < len(s.shown) {
			fail("%d lines printed, %d shown", len(got), len(s.shown))
			continue
		}
		for j, w := range s.shown {
			if !globMatch(w, got[j]) {
				fail("line %d is %q, shown %q", j+1, got[j], w)
				break
			}
		}
	}
	return problems
}

func indent(lines []string) string {
	if len(lines) == 0 {
		return "    (nothing)"
	}
	return "    " + strings.Join(lines, "\n    ")
}

// TestREADMETour runs README.md's CLI tour against a node it started and
// checks every line each command prints; see the conventions above.
func TestREADMETour(t *testing.T) {
	bash := lookBash(t)
	src, err := os.ReadFile(readmeFile)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []*fence
	for _, f := range fences(src) {
		if f.section == tourSection && f.lang == "sh" {
			blocks = append(blocks, f)
		}
	}
	if len(blocks) < 3 {
		t.Fatalf("README.md has %d sh blocks under %q: the tour moved, or the extractor is broken", len(blocks), tourSection)
	}
	var setup []string
	for _, l := range strings.Split(strings.TrimSpace(blocks[0].body), "\n") {
		l, _, _ = strings.Cut(l, " #")
		setup = append(setup, strings.TrimSpace(l))
	}
	if strings.Join(setup, "\n") != strings.Join(tourSetup, "\n") {
		t.Fatalf("README.md:%d: the tour's first block is %q; the test does %q itself (see the conventions)", blocks[0].line, setup, tourSetup)
	}
	var steps []tourStep
	shown := 0
	for _, f := range blocks[1:] {
		s, err := tourSteps("README.md", f)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range s {
			shown += len(st.shown)
		}
		steps = append(steps, s...)
	}
	if len(steps) < 15 || shown < 30 {
		t.Fatalf("the tour has %d steps showing %d lines: the extractor is broken", len(steps), shown)
	}

	dir := t.TempDir()
	if err := os.Symlink(testutil.DKVBinary(t), filepath.Join(dir, "dkv")); err != nil {
		t.Fatal(err)
	}
	m := &testutil.Member{Name: "default", ClientAddr: testutil.FreeAddr(t), PeerAddr: testutil.FreeAddr(t),
		HTTPAddr: testutil.FreeAddr(t), Dir: filepath.Join(dir, "dkv-data"), Log: filepath.Join(t.TempDir(), "serve.log")}
	m.Args = []string{"serve", "--data-dir", m.Dir,
		"--client-addr", m.ClientAddr, "--peer-addr", m.PeerAddr, "--http-addr", m.HTTPAddr}
	m.Start(t)
	t.Cleanup(m.Stop)
	waitReady(t, m.Process, time.Minute)

	for _, p := range runTour(t, bash, steps, dir, []string{"DKV_ENDPOINTS=" + m.ClientAddr}) {
		t.Error(p)
	}
	t.Logf("%d steps run, %d lines of output checked", len(steps), shown)
}

// waitReady waits until serve prints "ready", failing the test if it
// exits or timeout passes first.
func waitReady(t *testing.T, p *testutil.Process, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if b, _ := os.ReadFile(p.Log); strings.Contains(string(b), "\nready\n") {
			return
		}
		select {
		case <-p.Exited():
			t.Fatalf("dkv serve exited: %v\n%s", p.Err(), p.LogTail(20))
		case <-deadline:
			t.Fatalf("dkv serve not ready after %v:\n%s", timeout, p.LogTail(20))
		case <-tick.C:
		}
	}
}

// TestTourRunnerCatches: the tour's runner reports a line printed but
// not shown, one shown but not printed, a wrong one, a failed command and
// a background command's wrong line, and passes the right ones.
func TestTourRunnerCatches(t *testing.T) {
	bash := lookBash(t)
	doc := "```sh\n" +
		"echo hello\n# hello\n" + // 2: right
		"echo one; echo two\n# one\n# three\n" + // 4: a wrong line
		"true\n# shown\n" + // 7: shown, not printed
		"false\necho after\n# after\n" + // 9: a command failed
		"false || echo \"exit $?\"\n# exit 1\n" + // 12: right
		"V=x-123-y\necho \"$V\"\n# x-...-y\n" + // 14: right, with a wildcard
		"echo unshown\n" + // 17: printed, not shown
		"printf 'a\\nlater\\n' &\n# a\n" + // 18: right, and more later
		"echo b &\n# c\n" + // 20: a wrong line
		"```\n"
	f := fences([]byte(doc))
	steps, err := tourSteps("x.md", f[0])
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range runTour(t, bash, steps, t.TempDir(), nil) {
		where, _, _ := strings.Cut(p, ": ")
		got = append(got, where)
	}
	want := []string{"x.md:4", "x.md:7", "x.md:9", "x.md:17", "x.md:20"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("problems reported at %v, want %v", got, want)
	}
}
