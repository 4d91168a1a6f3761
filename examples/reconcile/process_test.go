package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/examples/internal/proctest"
	"github.com/dkv-io/dkv/internal/testutil"
)

// procScenario is the process test's view of the store: what the
// instances did (actions/) and what the children report (actual/).
type procScenario struct {
	t      *testing.T
	c      *client.Client
	prefix string
	seen   int // actions already checked
}

// action is one actions/ record: which instance did what.
type action struct{ by, what string }

func (s *procScenario) actions(ctx context.Context) ([]action, error) {
	r, err := s.c.List(ctx, s.prefix+actionsDir)
	if err != nil {
		return nil, err
	}
	kvs := slices.Clone(r.KVs)
	sort.Slice(kvs, func(i, j int) bool { return kvs[i].ModRevision < kvs[j].ModRevision })
	var out []action
	for _, kv := range kvs {
		by, what, _ := strings.Cut(string(kv.Value), " ")
		out = append(out, action{by, what})
	}
	return out, nil
}

func (s *procScenario) actual(ctx context.Context) (map[string]state, error) {
	r, err := s.c.List(ctx, s.prefix+actualDir)
	if err != nil {
		return nil, err
	}
	m := map[string]state{}
	for _, kv := range r.KVs {
		st, ok := parseState(kv.Value)
		if !ok {
			return nil, fmt.Errorf("%s = %q: unreadable", kv.Key, kv.Value)
		}
		m[strings.TrimPrefix(kv.Key, s.prefix+actualDir)] = st
	}
	return m, nil
}

// converge waits until every name of want runs its version as a live
// child and nothing else runs, and returns the children.
func (s *procScenario) converge(want map[string]string) map[string]state {
	s.t.Helper()
	var got map[string]state
	testutil.EventuallyNoError(s.t, 60*time.Second, fmt.Sprintf("the children to be %v", want), func(ctx context.Context) error {
		var err error
		if got, err = s.actual(ctx); err != nil {
			return err
		}
		have := map[string]string{}
		for name, st := range got {
			if !st.running || !alive(st.pid) {
				return fmt.Errorf("%s: %+v, not a live child", name, st)
			}
			have[name] = st.version
		}
		if !maps.Equal(have, want) {
			return fmt.Errorf("running %v", have)
		}
		return nil
	})
	return got
}

// newActions are the actions recorded since the last call.
func (s *procScenario) newActions(ctx context.Context) []action {
	s.t.Helper()
	all, err := s.actions(ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	n := all[s.seen:]
	s.seen = len(all)
	return n
}

func whats(as []action) []string {
	var w []string
	for _, a := range as {
		w = append(w, a.what)
	}
	return slices.Sorted(slices.Values(w))
}

// alive says whether pid is a process that has not exited: no such
// process, or a zombie, has.
func alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	// pid (comm) STATE ...; comm may hold spaces and parentheses.
	rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
	return !strings.HasPrefix(strings.TrimSpace(rest), "Z")
}

func waitExited(t *testing.T, what string, pid int) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, what+" to exit", func() bool { return !alive(pid) })
}

// TestReconcileProcesses is the scenario as real processes: a 3-member
// cluster, reconciler instances, and children that are processes the
// leader starts. The guarantee: every divergence is repaired by exactly
// one action, across a child killed with SIGKILL, the leading reconciler
// frozen (SIGSTOP) in the middle of a round and continued after it lost
// the leadership, and the next leader killed with SIGKILL in the middle of
// the same round; the children an old leader started are adopted, not
// restarted.
func TestReconcileProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts dkv and reconciler processes; skipped with -short")
	}
	bin := proctest.Example(t, "reconcile")
	cl, c, endpoints := proctest.Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := &procScenario{t: t, c: c, prefix: "rp/"}
	dir := t.TempDir()
	procs := map[string]*testutil.Process{}
	var order []string
	logs := func() string {
		var b strings.Builder
		for _, name := range order {
			fmt.Fprintf(&b, "\n%s log:\n%s", name, procs[name].LogTail(40))
		}
		return b.String() + cl.Logs(10)
	}
	t.Cleanup(func() {
		if t.Failed() || testing.Verbose() {
			t.Log(logs())
		}
	})
	start := func(name string, extra ...string) {
		args := append([]string{"--instance", name, "--endpoints", endpoints,
			"--prefix", s.prefix, "--ttl", "1s"}, extra...)
		procs[name] = testutil.StartProcess(t, filepath.Join(dir, name+".log"), bin, args...)
		order = append(order, name)
	}
	// The children outlive the instances by design: when the test ends,
	// the instances stop them (empty desired state) before stopping; and
	// a child still running loses its session once the cluster is gone.
	t.Cleanup(func() {
		for _, p := range procs {
			p.Stop()
		}
	})
	setDesired := func(del []string, put map[string]string) {
		t.Helper()
		var ops []client.Op
		for _, k := range del {
			ops = append(ops, client.OpDelete(s.prefix+desiredDir+k))
		}
		for k, v := range put {
			ops = append(ops, client.OpPut(s.prefix+desiredDir+k, []byte(v)))
		}
		if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	checkActions := func(round string, want ...string) []action {
		t.Helper()
		got := s.newActions(ctx)
		if w := slices.Sorted(slices.Values(want)); !slices.Equal(whats(got), w) {
			t.Fatalf("%s: actions %v, want exactly %v, each once", round, got, w)
		}
		return got
	}

	// Setup: ctl-a alone starts the children of the initial state. It is
	// to freeze (SIGSTOP) right before its 4th action: the first of round
	// 1, decided but not written.
	start("ctl-a", "--freeze-before", "4")
	setDesired(nil, map[string]string{"alt-1": "v1", "web-1": "v1", "web-2": "v2"})
	before := s.converge(map[string]string{"alt-1": "v1", "web-1": "v1", "web-2": "v2"})
	checkActions("setup", "start alt-1 v1", "start web-1 v1", "start web-2 v2")

	// Round 1: desired state changes. ctl-a freezes; ctl-b, the only other
	// candidate, takes over once ctl-a's session expires, and is killed
	// (SIGKILL) right after one action; ctl-c, started then, finishes the
	// round. Then ctl-a is continued and sends its stale action late.
	// ctl-b's children take 3s to come up: ctl-c leads before the child
	// of ctl-b's action registers, and must not start it again.
	start("ctl-b", "--crash-after", "1", "--start-delay", "3s")
	setDesired([]string{"alt-1"}, map[string]string{"web-1": "v2", "web-3": "v2"})
	select {
	case <-procs["ctl-b"].Exited():
	case <-time.After(60 * time.Second):
		t.Fatal("ctl-b did not lead and crash after its first action")
	}
	var ee *exec.ExitError
	if err := procs["ctl-b"].Err(); !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("ctl-b ended with %v, want SIGKILL", err)
	}
	start("ctl-c")
	after := s.converge(map[string]string{"web-1": "v2", "web-2": "v2", "web-3": "v2"})
	if err := syscall.Kill(procs["ctl-a"].Cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// ctl-a's late write has been answered once it notices that its
	// session is gone (its reconcile ends first).
	testutil.Eventually(t, 30*time.Second, "ctl-a to notice it lost its session", func() bool {
		b, _ := os.ReadFile(procs["ctl-a"].Log)
		return strings.Contains(string(b), "] lost-session ")
	})
	round1 := checkActions("round 1", "stop alt-1", "update web-1 v2", "start web-3 v2")
	by := map[string]int{}
	for _, a := range round1 {
		by[a.by]++
	}
	if by["ctl-b"] != 1 || by["ctl-c"] != 2 {
		t.Errorf("round 1 actions per instance %v: want ctl-b's one, then ctl-c's two, and none of frozen ctl-a's", by)
	}
	if b, _ := os.ReadFile(procs["ctl-a"].Log); !strings.Contains(string(b), errChanged.Error()) {
		t.Errorf("ctl-a's log does not show its late action refused")
	}
	if after["web-2"].pid != before["web-2"].pid {
		t.Errorf("web-2 was restarted (pid %d, then %d): the new leader did not adopt the old one's child",
			before["web-2"].pid, after["web-2"].pid)
	}
	waitExited(t, "alt-1's child", before["alt-1"].pid)
	waitExited(t, "web-1 v1's child", before["web-1"].pid)

	// Round 2: web-2's child is killed with SIGKILL; its registration
	// expires and the leader starts it again, once.
	if err := syscall.Kill(after["web-2"].pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyNoError(t, 60*time.Second, "web-2 to run again", func(ctx context.Context) error {
		a, err := s.actual(ctx)
		if err == nil && (!a["web-2"].running || a["web-2"].pid == after["web-2"].pid) {
			err = fmt.Errorf("web-2: %+v", a["web-2"])
		}
		return err
	})
	s.converge(map[string]string{"web-1": "v2", "web-2": "v2", "web-3": "v2"})
	checkActions("round 2", "start web-2 v2")

	// Round 3: nothing desired; every child is stopped, once.
	final := s.converge(map[string]string{"web-1": "v2", "web-2": "v2", "web-3": "v2"})
	setDesired([]string{"web-1", "web-2", "web-3"}, nil)
	s.converge(map[string]string{})
	checkActions("round 3", "stop web-1", "stop web-2", "stop web-3")
	for name, st := range final {
		waitExited(t, name+"'s child", st.pid)
	}

	// SIGTERM: the standing instances resign and exit cleanly.
	for _, name := range []string{"ctl-a", "ctl-c"} {
		procs[name].Stop()
		if err := procs[name].Err(); err != nil {
			t.Errorf("%s on SIGTERM: %v, want a clean exit", name, err)
		}
	}
}
