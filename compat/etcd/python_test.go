package etcdcompat

import (
	"context"
	"encoding/xml"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

var (
	pythonBin = flag.String("python", "/usr/bin/python3",
		"Debian's python3, where python3-etcd3, python3-etcd3gw and python3-pytest install (not a python3 of its own found first on PATH)")
	etcd3Tests = flag.String("python-etcd3-tests", "",
		"python3-etcd3's own tests/ directory (default: the one ./fetch-python-etcd3-tests unpacks under .debsrc)")
)

// wellKnownClientAddr is where python3-etcd3's suite and etcd3gw's tests
// expect a member: some of their tests build a client with the library's
// defaults (localhost:2379) rather than from PYTHON_ETCD_HTTP_URL, as the
// suite's own runner (pifpaf) starts etcd there.
const wellKnownClientAddr = "127.0.0.1:2379"

// pifpafNames are the member names the suite's runner gives etcd: a test
// asserts that every member's name starts with "pifpaf", and the suite
// finds the two members it stops (to take the cluster out of quorum) by
// `--name pifpaf[12]` on their command lines.
var pifpafNames = []string{"pifpaf0", "pifpaf1", "pifpaf2"}

// etcd3SuiteFails are the tests of python3-etcd3's own suite that fail on
// both targets, with why. They fail before or without anything a server
// says, so no target can pass them.
var etcd3SuiteFails = map[string]string{
	"TestEtcd3::test_lock_acquire":      lockTenacity,
	"TestEtcd3::test_lock_contended":    lockTenacity,
	"TestEtcd3::test_lock_acquire_none": lockTenacity,
}

const lockTenacity = "Debian's python3-etcd3 0.12 Lock.acquire hands Debian's tenacity 8.2 a wait function of tenacity's old signature: " +
	"TypeError: Lock.acquire.<locals>.wait() missing 1 required positional argument: 'delay_since_first_attempt', in the client"

// etcd3SuiteFailsOnDKV are the tests that pass on etcd and do not yet on
// DKV. Each is an expected difference, pending the work named: when it
// passes, the entry is stale and the test fails until it is removed.
var etcd3SuiteFailsOnDKV = map[string]string{}

// TestPythonEtcd3Suite runs python3-etcd3's own test suite (0.12, from
// Debian's source package: ./fetch-python-etcd3-tests) against Debian's
// python3-etcd3, with Debian's pytest, Hypothesis and mock, as its own
// runner runs it: a three-member cluster named pifpaf0-2, the first at
// localhost:2379 and named by PYTHON_ETCD_HTTP_URL, `etcdctl` (3.4) on
// PATH. Every test passes except the ones listed above, which must fail.
func TestPythonEtcd3Suite(t *testing.T) {
	kind := target(t)
	needPython(t, map[string]string{"etcd3": "python3-etcd3", "pytest": "python3-pytest",
		"hypothesis": "python3-hypothesis", "mock": "python3-mock", "tenacity": "python3-tenacity", "six": "python3-six"})
	tests := *etcd3Tests
	if tests == "" {
		found, _ := filepath.Glob(".debsrc/python-etcd3-*/tests/test_etcd3.py")
		if len(found) != 1 {
			t.Fatalf("python3-etcd3's test suite is not unpacked (found %q): run ./fetch-python-etcd3-tests (.ci/run does), or pass -python-etcd3-tests", found)
		}
		tests = filepath.Dir(found[0])
	}
	libDir := pythonModuleDir(t, "etcd3")

	c := startWellKnown(t, kind)
	work := t.TempDir()
	// Only tests/ is copied, so that `import etcd3` is Debian's library,
	// not a copy beside the tests.
	if err := os.CopyFS(filepath.Join(work, "tests"), os.DirFS(tests)); err != nil {
		t.Fatal(err)
	}
	bin := pythonToolDir(t, c)
	env := []string{
		"PATH=" + bin + ":" + os.Getenv("PATH"),
		"PYTHON_ETCD_HTTP_URL=http://" + wellKnownClientAddr,
		// The suite skips tests of features older than etcd 3.3 by this.
		"TEST_ETCD_VERSION=v3.4.23",
		// Its tox.ini puts the package directory on the path too: a test
		// patches "etcdrpc.AuthStub" by that name. pythonHelpers holds the
		// Hypothesis profile below.
		"PYTHONPATH=" + pythonHelpers(t) + ":" + libDir,
	}
	// The suite's Hypothesis tests use a function-scoped fixture, which
	// Hypothesis since 5.x refuses by a health check before running them
	// (Debian's is 6.67): the plugin loads a profile that suppresses that
	// one check, and nothing else, so those tests run as written.
	res := runPytest(t, work, env, "-p", "dkvcompat_hypothesis", "tests")
	fails := map[string]string{}
	for k, v := range etcd3SuiteFails {
		fails[k] = v
	}
	if kind == "dkv" {
		for k, v := range etcd3SuiteFailsOnDKV {
			fails[k] = v
		}
	}
	checkPytest(t, c, "python3-etcd3's suite", res, fails)
}

// TestPythonEtcd3gw runs python3-etcd3gw 2.0's own functional tests (the
// package ships them: etcd3gw.tests.test_etcd3gw) and this module's
// exercise of the calls they leave out (testdata/python/test_etcd3gw_more.py)
// against the target's grpc-gateway JSON API, on a member at
// localhost:2379 where the tests look for it. etcd3gw 2.0's client
// defaults to /v3alpha/, which etcd 3.4 no longer serves (404 there): a
// plugin points the client's default at /v3beta/, 3.4's path. The
// package's test_client.py (URL building and error mapping, no server)
// is not run.
func TestPythonEtcd3gw(t *testing.T) {
	kind := target(t)
	needPython(t, map[string]string{"etcd3gw": "python3-etcd3gw", "pytest": "python3-pytest",
		"oslotest": "python3-oslotest", "testtools": "python3-testtools"})
	c := startWellKnown(t, kind)
	work := t.TempDir()
	more, err := os.ReadFile(filepath.Join("testdata", "python", "test_etcd3gw_more.py"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "test_etcd3gw_more.py"), more, 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + pythonToolDir(t, c) + ":" + os.Getenv("PATH"), "PYTHONPATH=" + pythonHelpers(t)}
	res := runPytest(t, work, env, "-p", "dkvcompat_etcd3gw", "--pyargs", "etcd3gw.tests.test_etcd3gw", "test_etcd3gw_more.py")
	checkPytest(t, c, "etcd3gw", res, nil)
}

// startWellKnown starts a cluster laid out as the Python suites expect,
// with pifpaf0 leading so that its serializable reads after a write are
// not behind the leader's.
func startWellKnown(t *testing.T, kind string) *cluster {
	t.Helper()
	l, err := net.Listen("tcp", wellKnownClientAddr)
	if err != nil {
		t.Fatalf("%s is taken (%v): the Python suites need a member there", wellKnownClientAddr, err)
	}
	l.Close()
	c := startClusterWith(t, kind, layout{names: pifpafNames, clientAddrs: map[int]string{0: wellKnownClientAddr}})
	c.makeLeader(t, pifpafNames[0])
	return c
}

// needPython fails the test unless Debian's python3 imports every module
// (module → the Debian package that installs it).
func needPython(t *testing.T, modules map[string]string) {
	t.Helper()
	var missing []string
	for mod, pkg := range modules {
		if err := exec.Command(*pythonBin, "-c", "import "+mod).Run(); err != nil {
			missing = append(missing, pkg)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		t.Fatalf("%s cannot import what this test needs: apt-get install %s (.ci/run installs them)", *pythonBin, strings.Join(missing, " "))
	}
}

// pythonModuleDir is the directory of an importable package.
func pythonModuleDir(t *testing.T, mod string) string {
	t.Helper()
	out, err := exec.Command(*pythonBin, "-c", "import os, "+mod+"; print(os.path.dirname("+mod+".__file__))").Output()
	if err != nil {
		t.Fatalf("locate %s: %v", mod, err)
	}
	return strings.TrimSpace(string(out))
}

// pythonHelpers is the directory of this module's pytest plugins.
func pythonHelpers(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("testdata", "python"))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// pythonToolDir makes a directory to put first on the suites' PATH:
// `etcdctl` is the -etcdctl binary, and `pgrep` answers the one question
// the suite asks it (`pgrep -f -- '--name pifpaf[12]'`, the members to
// stop with SIGSTOP) with the pids of the members this test started, so
// that no other process on the machine that matches is ever signalled.
func pythonToolDir(t *testing.T, c *cluster) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Symlink(*etcdctlBin, filepath.Join(dir, "etcdctl")); err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, m := range c.members[1:] {
		pids = append(pids, fmt.Sprint(m.Cmd.Process.Pid))
	}
	script := "#!/bin/sh\n" +
		"if [ \"$*\" != '-f -- --name pifpaf[12]' ]; then echo \"pgrep stand-in: unexpected arguments: $*\" >&2; exit 2; fi\n" +
		"printf '%s\\n' " + strings.Join(pids, " ") + "\n"
	if err := os.WriteFile(filepath.Join(dir, "pgrep"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// pytestResult is what one pytest run reported, by test
// (Class::test_name): "passed", "failed", "error" or "skipped".
type pytestResult struct {
	outcomes map[string]string
	output   string
	took     time.Duration
}

// runPytest runs pytest in dir with a JUnit XML report and reads each
// test's outcome from it. pytest's own exit status only says whether
// something failed, which checkPytest decides per test.
func runPytest(t *testing.T, dir string, env []string, args ...string) pytestResult {
	t.Helper()
	report := filepath.Join(t.TempDir(), "report.xml")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, *pythonBin, append([]string{"-m", "pytest", "-p", "no:cacheprovider", "-rfEs",
		"-o", "junit_family=xunit1", "--junitxml=" + report}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	res := pytestResult{outcomes: map[string]string{}, output: string(out), took: time.Since(start)}
	if ctx.Err() != nil {
		t.Fatalf("pytest did not finish in time:\n%s", out)
	}
	data, rerr := os.ReadFile(report)
	if rerr != nil {
		t.Fatalf("pytest wrote no report (%v; exit: %v):\n%s", rerr, err, out)
	}
	var suites struct {
		Cases []struct {
			Class   string    `xml:"classname,attr"`
			Name    string    `xml:"name,attr"`
			Failure *struct{} `xml:"failure"`
			Error   *struct{} `xml:"error"`
			Skipped *struct{} `xml:"skipped"`
		} `xml:"testsuite>testcase"`
	}
	if err := xml.Unmarshal(data, &suites); err != nil {
		t.Fatalf("pytest's report: %v", err)
	}
	for _, tc := range suites.Cases {
		class := tc.Class[strings.LastIndex(tc.Class, ".")+1:]
		id := class + "::" + tc.Name
		outcome := "passed"
		switch {
		case tc.Error != nil:
			outcome = "error"
		case tc.Failure != nil:
			outcome = "failed"
		case tc.Skipped != nil:
			outcome = "skipped"
		}
		// A test that failed and then errored in teardown has two
		// entries; the worse one counts.
		if prev, ok := res.outcomes[id]; !ok || prev == "passed" {
			res.outcomes[id] = outcome
		}
	}
	return res
}

// checkPytest asserts that every test passed except those in fails, each
// of which must still fail (an entry that passes is stale), and that no
// test was skipped (a suite that cannot reach the server skips rather
// than fails).
func checkPytest(t *testing.T, c *cluster, what string, res pytestResult, fails map[string]string) {
	t.Helper()
	if len(res.outcomes) == 0 {
		t.Fatalf("%s: pytest ran no test:\n%s", what, res.output)
	}
	var ids []string
	for id := range res.outcomes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	passed := 0
	var problems []string
	for _, id := range ids {
		got := res.outcomes[id]
		if got == "passed" {
			passed++
		}
		reason, expected := fails[id]
		switch {
		case expected && got == "passed":
			problems = append(problems, fmt.Sprintf("%s passed on %s but is listed as failing (%s): remove the entry", id, c.kind, reason))
		case !expected && got != "passed":
			problems = append(problems, fmt.Sprintf("%s %s on %s", id, got, c.kind))
		}
	}
	for id := range fails {
		if _, ok := res.outcomes[id]; !ok {
			problems = append(problems, fmt.Sprintf("%s is listed as failing but the suite has no such test", id))
		}
	}
	t.Logf("%s on %s: %d/%d passed in %v", what, c.kind, passed, len(ids), res.took.Round(time.Second))
	if len(problems) > 0 {
		sort.Strings(problems)
		t.Fatalf("%s on %s:\n  %s\n\npytest's output:\n%s%s", what, c.kind, strings.Join(problems, "\n  "), tail(res.output, 12000), c.logs())
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "...\n" + s[len(s)-n:]
}
