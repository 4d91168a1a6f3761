package etcdcompat

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dkv-io/dkv/internal/testutil"
)

// step is one etcdctl invocation of the scripted session.
//
// Args may name variables as {{name}}: {{ep:n1}} (a member's client
// address), {{id:n2}} (a member's id, hex), {{tmp}} (a scratch directory)
// and any variable an earlier step captured. The transcript shows the
// args as written, with the variables unexpanded, so the script's text
// is the same for every target.
type step struct {
	args  []string
	stdin string
	// only, if set, sends the command to that one member instead of to
	// all three endpoints.
	only string
	// bg starts the command as a child that runs beside the next steps;
	// a later step with wait set to the same handle waits until the
	// child's stdout matches until, then stops it with SIGINT and records
	// its output in the transcript at that point.
	bg, wait string
	until    string
	// keep leaves a waited-for child running; a later step with stop set
	// to its handle stops it and records its whole output once it has
	// exited. The keep step itself records only stdout up to the end of
	// until's match: a running child may be between two writes (etcdctl
	// prints a key and its value with two Printlns), so anything past the
	// match, and stderr, is recorded by the stop step, after the child's
	// exit has flushed it. until must therefore match all the child
	// prints before it blocks. quiet names another child whose output so
	// far that step records first (it should have printed nothing yet).
	keep        bool
	stop, quiet string
	// retryUntil re-runs the command until its stdout matches, for up to
	// 20s: it waits for a child to reach a state the store shows.
	retryUntil string
	// capture names a variable to set from the first group of the regexp
	// captureRE applied to stdout; the value is also replaced by
	// <name> wherever it is printed.
	capture, captureRE string
	// captureID says the captured value is a hex id (a lease, a member),
	// printed as <capture> in hex and in decimal; other captures (a
	// revision) are printed as they are.
	captureID bool
	// sortLines sorts stdout's lines: the order the command prints them in
	// is not defined (endpoints answering in parallel, map order).
	sortLines bool
	// noStderr drops stderr: etcdctl logs zap lines with timestamps there.
	noStderr bool
	// rules are this step's own normalizations (regexp → replacement).
	rules [][2]string
	// retry re-runs the command until it exits 0, for up to 20s, and
	// records the run that did: etcd refuses membership changes with
	// "unhealthy cluster" until every member has been connected to the
	// others for 5s, a state of a just-started cluster, not of the API.
	retry bool
	// fix is a normalization a regexp cannot express.
	fix func(string) string
}

// sortInitialCluster sorts the list in ETCD_INITIAL_CLUSTER="a=u,b=v",
// which etcdctl prints in the order of member ids.
func sortInitialCluster(s string) string {
	return regexp.MustCompile(`ETCD_INITIAL_CLUSTER="([^"]*)"`).ReplaceAllStringFunc(s, func(m string) string {
		inner := m[len(`ETCD_INITIAL_CLUSTER="`) : len(m)-1]
		ms := strings.Split(inner, ",")
		sort.Strings(ms)
		return `ETCD_INITIAL_CLUSTER="` + strings.Join(ms, ",") + `"`
	})
}

// sortAttachedKeys sorts the list in "attached keys([b a])": etcd prints a
// lease's keys in map order.
func sortAttachedKeys(s string) string {
	return regexp.MustCompile(`attached keys\(\[([^\]]*)\]\)`).ReplaceAllStringFunc(s, func(m string) string {
		inner := m[len("attached keys([") : len(m)-len("])")]
		ks := strings.Fields(inner)
		sort.Strings(ks)
		return "attached keys([" + strings.Join(ks, " ") + "])"
	})
}

// session is the scripted etcdctl session. It starts on a fresh store, so
// revisions are the same on every target: etcd's first write is
// revision 2.
func session() []step {
	endpointStatus := [2]string{
		`(?m)^(<ep:n\d>), (<id:n\d>), [^,]+, [^,]+, (true|false), (true|false), \d+, \d+, \d+, `,
		"$1, $2, <version>, <dbsize>, $3, $4, <raft_term>, <raft_index>, <raft_applied_index>, "}
	return []step{
		// put/get
		{args: []string{"put", "foo", "bar"}},
		{args: []string{"put", "foo1", "bar1"}},
		{args: []string{"put", "foo2", "bar2"}},
		{args: []string{"put", "foo3", "bar3"}},
		{args: []string{"put", "zoo", "z"}},
		{args: []string{"get", "foo"}},
		{args: []string{"get", "foo", "--prefix"}},
		{args: []string{"get", "foo", "--prefix", "--sort-by=KEY", "--order=DESCEND"}},
		{args: []string{"get", "foo", "--prefix", "--sort-by=VALUE", "--order=DESCEND", "--limit=2"}},
		{args: []string{"get", "foo", "--prefix", "--sort-by=CREATE", "--order=ASCEND"}},
		{args: []string{"get", "foo", "--prefix", "--sort-by=MODIFY", "--order=DESCEND", "--limit=3"}},
		{args: []string{"get", "foo", "--prefix", "--sort-by=VERSION", "--order=ASCEND"}},
		{args: []string{"get", "foo1", "zoo"}},
		{args: []string{"get", "--from-key", "foo2"}},
		{args: []string{"put", "foo", "baz"}},
		{args: []string{"get", "foo", "--rev=2"}},
		{args: []string{"get", "foo", "--rev=5", "--prefix"}},
		{args: []string{"get", "foo", "--prefix", "--keys-only"}},
		{args: []string{"get", "foo", "--print-value-only"}},
		{args: []string{"get", "foo", "--consistency=s"}},
		{args: []string{"get", "foo", "-w", "json"}, only: "n1"},
		{args: []string{"get", "foo", "--prefix", "--limit=2", "-w", "json"}, only: "n1"},
		{args: []string{"get", "foo", "--prefix", "--limit=2", "--keys-only", "-w", "fields"}, only: "n1"},
		{args: []string{"get", "missing"}},
		{args: []string{"get", "foo", "--rev=100"}},
		{args: []string{"put", "foo2", "new", "--prev-kv"}},
		{args: []string{"put", "foo2", "--ignore-value", "--prev-kv"}},
		// del
		{args: []string{"del", "foo3", "--prev-kv"}},
		{args: []string{"del", "nothing"}},
		{args: []string{"del", "foo", "--prefix"}},
		{args: []string{"get", "", "--prefix"}},
		// txn, interactive input on stdin
		{args: []string{"put", "t", "1"}},
		{args: []string{"txn", "-i"}, stdin: "value(\"t\") = \"1\"\n\nput t 2\nget t\n\nput t never\n\n"},
		{args: []string{"txn", "-i"}, stdin: "value(\"t\") = \"1\"\nmod(\"t\") > \"0\"\n\nput t never\n\nget t\nput u from-failure\n\n"},
		{args: []string{"txn", "-i", "-w", "json"}, stdin: "version(\"t\") = \"2\"\ncreate(\"u\") > \"0\"\n\ndel u --prev-kv\n\n\n", only: "n1"},
		{args: []string{"txn", "-i"}, stdin: "\nput a 1\nput a 2\n\n\n"},
		// watch: historical events from a revision, with a prefix; the
		// last put of each watched range is the marker the child waits for.
		{args: []string{"put", "foo-end", "end"}},
		{bg: "w1", args: []string{"watch", "--rev=2", "--prefix", "foo"}},
		{wait: "w1", until: `foo-end\nend\n`},
		{bg: "w2", args: []string{"watch", "--rev=3", "--prev-kv", "foo2"}},
		{args: []string{"put", "foo2", "last"}},
		{wait: "w2", until: `\nlast\n`},
		// live watch: the child asks from the revision of the first put,
		// so it sees every event whenever its stream is established.
		{args: []string{"put", "jobs/0", "x", "-w", "json"}, capture: "jobsrev", captureRE: `"revision":(\d+)`, only: "n1"},
		{bg: "w3", args: []string{"watch", "--prefix", "jobs/", "--rev={{jobsrev}}"}},
		{args: []string{"put", "jobs/1", "a"}},
		{args: []string{"put", "jobs/2", "b"}},
		{args: []string{"del", "jobs/1"}},
		{args: []string{"put", "jobs/end", "done"}},
		{wait: "w3", until: `jobs/end\ndone\n`},
		// leases
		{args: []string{"lease", "grant", "60"}, capture: "L1", captureRE: `lease ([0-9a-f]+) granted`, captureID: true},
		{args: []string{"lease", "grant", "120"}, capture: "L2", captureRE: `lease ([0-9a-f]+) granted`, captureID: true},
		{args: []string{"put", "leased", "v", "--lease={{L1}}"}},
		{args: []string{"put", "leased2", "v", "--lease={{L1}}"}},
		{args: []string{"put", "leased", "v2", "--ignore-lease"}},
		{args: []string{"put", "nokey", "--ignore-value"}},
		{args: []string{"get", "leased", "-w", "fields"}, only: "n1"},
		{args: []string{"lease", "keep-alive", "--once", "{{L1}}"}},
		{args: []string{"lease", "timetolive", "{{L1}}"}, rules: [][2]string{{`remaining\(\d+s\)`, `remaining(<ttl>s)`}}},
		{args: []string{"lease", "timetolive", "{{L1}}", "--keys"}, fix: sortAttachedKeys, rules: [][2]string{{`remaining\(\d+s\)`, `remaining(<ttl>s)`}}},
		{args: []string{"lease", "list"}, sortLines: true},
		{args: []string{"lease", "revoke", "{{L1}}"}},
		{args: []string{"get", "leased", "--prefix"}},
		{args: []string{"lease", "timetolive", "{{L1}}"}},
		{args: []string{"lease", "revoke", "{{L1}}"}},
		{args: []string{"put", "x", "y", "--lease=1234abcd"}},
		{args: []string{"lease", "revoke", "{{L2}}"}},
		{args: []string{"lease", "list"}},
		// lock with a command: etcdctl prints only the command's output.
		{args: []string{"lock", "mylock", "--", "echo", "held"}},
		{args: []string{"get", "mylock", "--prefix", "--keys-only"}},
		// A held lock: a second locker runs its command once the holder
		// is stopped.
		{bg: "l1", args: []string{"lock", "mylock2"}},
		// etcdctl lock prints the key it holds and its (empty) value, two
		// lines, and then blocks.
		{wait: "l1", until: `mylock2/[0-9a-f]+\n\n`, rules: [][2]string{{`mylock2/[0-9a-f]+`, `mylock2/<lease>`}}, keep: true},
		{bg: "l2", args: []string{"lock", "mylock2", "--", "echo", "second"}},
		{args: []string{"get", "mylock2", "--prefix", "--keys-only"}, retryUntil: `(?s)mylock2/.*mylock2/`, rules: [][2]string{{`mylock2/[0-9a-f]+`, `mylock2/<lease>`}}},
		{stop: "l1", quiet: "l2", rules: [][2]string{{`mylock2/[0-9a-f]+`, `mylock2/<lease>`}}},
		{wait: "l2", until: `second\n`},
		// election: a campaigner, then an observer that sees it lead.
		{bg: "e1", args: []string{"elect", "e1", "v1"}},
		{bg: "e1l", args: []string{"elect", "-l", "e1"}},
		{wait: "e1l", until: `\nv1\n`, rules: [][2]string{{`e1/[0-9a-f]+`, `e1/<lease>`}}},
		{args: []string{"get", "e1", "--prefix", "--print-value-only"}},
		{wait: "e1", until: `\nv1\n`, rules: [][2]string{{`e1/[0-9a-f]+`, `e1/<lease>`}}},
		// cluster and maintenance
		{args: []string{"member", "list"}, sortLines: true},
		// A learner that is never started: added, updated, refused
		// promotion (it is not in sync), removed.
		{args: []string{"member", "add", "n4", "--learner", "--peer-urls=http://{{peer:n4}}"}, capture: "id:n4",
			captureRE: `Member +([0-9a-f]+) added`, captureID: true, retry: true, fix: sortInitialCluster},
		{args: []string{"member", "list"}, sortLines: true},
		{args: []string{"member", "update", "{{id:n4}}", "--peer-urls=http://{{peer:n4b}}"}},
		{args: []string{"member", "promote", "{{id:n4}}"}},
		{args: []string{"member", "remove", "{{id:n4}}"}},
		{args: []string{"member", "list"}, sortLines: true},
		{args: []string{"alarm", "list"}},
		{args: []string{"endpoint", "status"}, rules: [][2]string{endpointStatus}},
		{args: []string{"endpoint", "health"}, sortLines: true, rules: [][2]string{{`took = \S+`, `took = <duration>`}}},
		{args: []string{"endpoint", "hashkv"}, rules: [][2]string{{`(?m)^(<ep:n\d>), \d+$`, `$1, <hash>`}}},
		{args: []string{"move-leader", "{{id:n2}}"}},
		{args: []string{"endpoint", "status"}, rules: [][2]string{endpointStatus}},
		{args: []string{"compaction", "3"}},
		{args: []string{"get", "foo", "--rev=2"}},
		{args: []string{"compaction", "3"}},
		// A watch from a compacted revision is canceled by the server.
		{args: []string{"watch", "--rev=2", "foo"}},
		{args: []string{"watch", "--rev=2", "foo", "-w", "json"}, only: "n1"},
		{args: []string{"compaction", "--physical", "4"}},
		{args: []string{"get", "t", "--rev=5"}},
		{args: []string{"defrag"}},
		{args: []string{"snapshot", "save", "{{tmp}}/snap.db"}, only: "n1", noStderr: true},
		// auth
		{args: []string{"user", "add", "root", "--new-user-password=rootpw"}},
		{args: []string{"role", "add", "reader"}},
		{args: []string{"role", "grant-permission", "reader", "read", "t"}},
		{args: []string{"user", "add", "alice", "--new-user-password=alicepw"}},
		{args: []string{"user", "grant-role", "alice", "reader"}},
		{args: []string{"auth", "enable"}},
		{args: []string{"get", "t"}},
		{args: []string{"get", "t", "--user=alice:alicepw"}},
		{args: []string{"put", "t", "3", "--user=alice:alicepw"}},
		{args: []string{"get", "t", "--user=alice:wrong"}},
		{args: []string{"user", "list", "--user=root:rootpw"}},
		{args: []string{"role", "get", "reader", "--user=root:rootpw"}},
		{args: []string{"auth", "disable", "--user=root:rootpw"}},
		{args: []string{"get", "t"}},
	}
}

// globalRules are the normalizations applied to every step's output, after
// the known ids and addresses have been replaced by their names. Keep
// this list minimal; README.md lists it.
var globalRules = [][2]string{
	// etcdctl prints some ids with %16x: an id of fewer than 16 hex
	// digits is padded with spaces, which stay when it becomes a name.
	{` {2,}(<(?:id:|cluster|L)[^>]*>)`, ` $1`},
	// The raft term is that of the run's elections.
	{`"raft_term":\d+`, `"raft_term":<raft_term>`},
	{`"RaftTerm" : \d+`, `"RaftTerm" : <raft_term>`},
	// etcdctl's client logs each failed attempt of a call on stderr as a
	// zap line with a timestamp and a random client id; the rest of the
	// line (endpoint, gRPC code, message) is kept.
	{`"ts":"[^"]*",`, ``},
	{`endpoint://client-[0-9a-f-]+/`, `endpoint://client-<uuid>/`},
}

type bgProc struct {
	cmd    *exec.Cmd
	stdout *syncBuffer
	stderr *syncBuffer
	done   chan struct{}
	err    error
}

// runSession runs the scripted session against c and returns its
// normalized transcript, one entry a step.
func runSession(t *testing.T, c *cluster) []string {
	t.Helper()
	c.makeLeader(t, "n1")
	tmp := t.TempDir()
	vars := map[string]string{"tmp": tmp}
	// names maps a printed value to the name it is shown as; a key
	// "#N" is the decimal N, replaced only in id fields.
	names := map[string]string{tmp: "<tmp>"}
	for _, m := range c.members {
		vars["ep:"+m.Name] = m.ClientAddr
		vars["id:"+m.Name] = strconv.FormatUint(m.memberID, 16)
		names[m.ClientAddr] = "<ep:" + m.Name + ">"
		names[m.PeerAddr] = "<peer:" + m.Name + ">"
		names[strconv.FormatUint(m.memberID, 16)] = "<id:" + m.Name + ">"
		names["#"+strconv.FormatUint(m.memberID, 10)] = "<id:" + m.Name + ">"
	}
	// Peer addresses for a member the script adds but never starts.
	for _, extra := range []string{"n4", "n4b"} {
		a := testutil.FreeAddr(t)
		vars["peer:"+extra] = a
		names[a] = "<peer:" + extra + ">"
	}
	names[strconv.FormatUint(c.clusterID, 16)] = "<cluster>"
	names["#"+strconv.FormatUint(c.clusterID, 10)] = "<cluster>"

	expand := func(s string) string {
		return regexp.MustCompile(`\{\{([^}]+)\}\}`).ReplaceAllStringFunc(s, func(m string) string {
			k := m[2 : len(m)-2]
			v, ok := vars[k]
			if !ok {
				t.Fatalf("script uses undefined variable %s", m)
			}
			return v
		})
	}
	normalize := func(s string, st step) string { return normalizeOutput(s, names, st) }
	command := func(st step) *exec.Cmd {
		eps := strings.Join(c.endpoints(), ",")
		if st.only != "" {
			eps = c.memberByName(st.only).ClientAddr
		}
		args := []string{"--endpoints=" + eps, "--dial-timeout=5s", "--command-timeout=10s"}
		for _, a := range st.args {
			args = append(args, expand(a))
		}
		cmd := exec.Command(*etcdctlBin, args...)
		cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
		if st.stdin != "" {
			cmd.Stdin = strings.NewReader(expand(st.stdin))
		}
		return cmd
	}
	record := func(st step, title string, stdout, stderr string, err error) string {
		if st.capture != "" {
			m := regexp.MustCompile(st.captureRE).FindStringSubmatch(stdout)
			if m == nil {
				t.Fatalf("%s: capture %s: %q not in output:\n%s%s", title, st.capture, st.captureRE, stdout, stderr)
			}
			vars[st.capture] = m[1]
			if st.captureID {
				names[m[1]] = "<" + st.capture + ">"
				// Leases are also printed in decimal (JSON output).
				if v, err := strconv.ParseUint(m[1], 16, 64); err == nil {
					names["#"+strconv.FormatUint(v, 10)] = "<" + st.capture + ">"
					vars[st.capture+":dec"] = strconv.FormatUint(v, 10)
				}
			}
		}
		var b strings.Builder
		b.WriteString("$ " + title + "\n")
		b.WriteString(normalize(stdout, st))
		if stderr != "" && !st.noStderr {
			b.WriteString("[stderr]\n" + normalize(stderr, step{rules: st.rules, sortLines: st.sortLines}))
		}
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%s: %v", title, err)
		}
		if code != 0 {
			fmt.Fprintf(&b, "[exit %d]\n", code)
		}
		return b.String()
	}

	bgs := map[string]*bgProc{}
	bgTitles := map[string]string{}
	var out []string
	for _, st := range session() {
		switch {
		case st.bg != "":
			cmd := command(st)
			p := &bgProc{cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
			cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { p.err = cmd.Wait(); close(p.done) }()
			t.Cleanup(func() {
				select {
				case <-p.done:
				default:
					_ = cmd.Process.Kill()
					<-p.done
				}
			})
			bgs[st.bg] = p
			bgTitles[st.bg] = "etcdctl " + strings.Join(st.args, " ") + " &"
		case st.wait != "":
			p := bgs[st.wait]
			re := regexp.MustCompile(st.until)
			deadline := time.Now().Add(20 * time.Second)
			for !re.MatchString(p.stdout.String()) {
				select {
				case <-p.done:
					t.Fatalf("%s exited before printing %q: %v\nstdout:\n%s\nstderr:\n%s", bgTitles[st.wait], st.until, p.err, p.stdout, p.stderr)
				default:
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: %q not printed within 20s\nstdout:\n%s\nstderr:\n%s", bgTitles[st.wait], st.until, p.stdout, p.stderr)
				}
				time.Sleep(20 * time.Millisecond) // poll interval
			}
			if st.keep {
				out = append(out, record(st, bgTitles[st.wait]+" (printed "+strconv.Quote(st.until)+", left running)", keptOutput(p.stdout.String(), re), "", nil))
				continue
			}
			stopBg(t, p, bgTitles[st.wait])
			// Stopped by our signal: its exit status is ours, not its.
			out = append(out, record(st, bgTitles[st.wait]+" (stopped once it printed "+strconv.Quote(st.until)+")", p.stdout.String(), p.stderr.String(), nil))
		case st.stop != "":
			if st.quiet != "" {
				q := bgs[st.quiet]
				out = append(out, record(st, bgTitles[st.quiet]+" (output so far)", q.stdout.String(), q.stderr.String(), nil))
			}
			p := bgs[st.stop]
			stopBg(t, p, bgTitles[st.stop])
			out = append(out, record(st, bgTitles[st.stop]+" (stopped)", p.stdout.String(), p.stderr.String(), nil))
		default:
			var stdout, stderr bytes.Buffer
			var err error
			for deadline := time.Now().Add(20 * time.Second); ; {
				stdout.Reset()
				stderr.Reset()
				cmd := command(st)
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				err = cmd.Run()
				done := !st.retry || err == nil
				if st.retryUntil != "" {
					done = regexp.MustCompile(st.retryUntil).MatchString(stdout.String())
				}
				if done {
					break
				}
				if time.Now().After(deadline) {
					if st.retryUntil != "" {
						t.Fatalf("etcdctl %s: stdout did not match %q within 20s:\n%s%s", strings.Join(st.args, " "), st.retryUntil, stdout.String(), stderr.String())
					}
					break
				}
				time.Sleep(200 * time.Millisecond) // poll interval
			}
			title := "etcdctl " + strings.Join(st.args, " ")
			if st.stdin != "" {
				title += " <<< " + strconv.Quote(st.stdin)
			}
			if st.only != "" {
				title += "   # on " + st.only
			}
			out = append(out, record(st, title, stdout.String(), stderr.String(), err))
		}
	}
	if fi, err := os.Stat(filepath.Join(tmp, "snap.db")); err != nil || fi.Size() == 0 {
		t.Errorf("snapshot save left no snapshot file: %v", err)
	}
	return out
}

// decimalIDField matches an id field printed in decimal by -w json and
// -w fields.
var decimalIDField = regexp.MustCompile(`("(?:cluster_id|member_id|lease|ID|leader)":|"(?:ClusterID|MemberID|Lease)" : )(\d+)`)

// normalizeOutput applies the normalization README.md lists: known values
// (names maps each to the name it is shown as), then globalRules and the
// step's own rules, its fix, and its line sort.
func normalizeOutput(s string, names map[string]string, st step) string {
	keys := make([]string, 0, len(names))
	for k := range names {
		keys = append(keys, k)
	}
	// Longest first, so an address is replaced before a shorter
	// value it contains.
	sort.Slice(keys, func(i, j int) bool { return len(keys[i]) > len(keys[j]) })
	for _, k := range keys {
		if strings.HasPrefix(k, "#") {
			continue
		}
		re := regexp.QuoteMeta(k)
		// Whole words only: the decimal id 12 is not replaced
		// inside 123.
		if regexp.MustCompile(`^\w`).MatchString(k) {
			re = `\b` + re
		}
		if regexp.MustCompile(`\w$`).MatchString(k) {
			re += `\b`
		}
		s = regexp.MustCompile(re).ReplaceAllString(s, names[k])
	}
	// Decimal ids (names' keys "#N") only as the value of an id field of
	// JSON or fields output: a small id (a lease 5) must not rename
	// every other 5.
	s = decimalIDField.ReplaceAllStringFunc(s, func(m string) string {
		sub := decimalIDField.FindStringSubmatch(m)
		if name, ok := names["#"+sub[2]]; ok {
			return sub[1] + name
		}
		return m
	})
	for _, r := range slices.Concat(globalRules, st.rules) {
		s = regexp.MustCompile(r[0]).ReplaceAllString(s, r[1])
	}
	if st.fix != nil {
		s = st.fix(s)
	}
	if st.sortLines && s != "" {
		lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
		sort.Strings(lines)
		s = strings.Join(lines, "\n") + "\n"
	}
	return s
}

// keptOutput is what a wait step that leaves its child running records:
// stdout up to the end of until's first match. The child is still
// running, so what follows the match may or may not have been written
// yet; the stop step records it after the child exits.
func keptOutput(stdout string, until *regexp.Regexp) string {
	loc := until.FindStringIndex(stdout)
	if loc == nil {
		return stdout
	}
	return stdout[:loc[1]]
}

// stopBg stops a child with SIGINT, as Ctrl-C would.
func stopBg(t *testing.T, p *bgProc, title string) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not exit on SIGINT", title)
	}
}

// TestEtcdctlSession runs the scripted etcdctl session against a fresh
// etcd cluster to record what etcd prints, then against a fresh cluster
// of the target, and compares the two transcripts step by step. With
// -target=etcd the second run is a second etcd cluster, which checks that
// the script and its normalization are deterministic.
func TestEtcdctlSession(t *testing.T) {
	tgt := target(t)
	ref := startCluster(t, "etcd")
	want := runSession(t, ref)
	ref.stop() // not needed any more; leave the cores to the target
	if dir := os.Getenv("COMPAT_TRANSCRIPTS"); dir != "" {
		_ = os.WriteFile(filepath.Join(dir, "etcdctl-etcd.txt"), []byte(strings.Join(want, "")), 0o644)
	}
	got := runSession(t, startCluster(t, tgt))
	if dir := os.Getenv("COMPAT_TRANSCRIPTS"); dir != "" {
		_ = os.WriteFile(filepath.Join(dir, "etcdctl-"+tgt+".txt"), []byte(strings.Join(got, "")), 0o644)
	}
	if len(got) != len(want) {
		t.Fatalf("transcript has %d steps, etcd's has %d", len(got), len(want))
	}
	bad := 0
	used := map[int]bool{}
	for i := range want {
		if !checkStep(t, tgt, i, want[i], got[i], used) {
			bad++
		}
	}
	checkAllUsed(t, tgt, used)
	if bad == 0 {
		t.Logf("%d etcdctl steps match etcd's output or their expected difference (expected_test.go)", len(want))
	}
}

// syncBuffer is a bytes.Buffer safe for a child's writes and our reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
