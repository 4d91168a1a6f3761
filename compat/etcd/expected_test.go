package etcdcompat

import (
	"strings"
	"testing"
)

// expectedDiff is one step of the etcdctl session where a target is known
// to differ from etcd: the step (its title line, as the transcript shows
// it), the target's whole expected transcript entry after normalization,
// and why. The entry is asserted exactly: any other output of that step
// fails, as does the step printing what etcd prints (then the entry is
// stale and must go). Nothing else is exempt.
type expectedDiff struct {
	target, step string
	want         string
	reason       string
}

var expectedDiffs = []expectedDiff{
	{
		target: "dkv",
		step:   "$ etcdctl member update {{id:n4}} --peer-urls=http://{{peer:n4b}}",
		want: `$ etcdctl member update {{id:n4}} --peer-urls=http://{{peer:n4b}}
[stderr]
{"level":"warn","caller":"clientv3/retry_interceptor.go:62","msg":"retrying of unary invoker failed","target":"endpoint://client-<uuid>/<ep:n1>","attempt":0,"error":"rpc error: code = FailedPrecondition desc = etcdserver: member <id:n4> (<peer:n4>) has not started: it will join under the id its name and peer URL give, so it cannot move before it starts; remove it and add it at the new address"}
Error: rpc error: code = FailedPrecondition desc = etcdserver: member <id:n4> (<peer:n4>) has not started: it will join under the id its name and peer URL give, so it cannot move before it starts; remove it and add it at the new address
[exit 1]
`,
		reason: "the learner the session adds is never started, and DKV gives a member that joins the id its name and peer address derive, so it cannot move before it starts (started members move: docs/etcd-compat.md, Cluster)",
	},
}

// checkStep compares the target's entry for one step with etcd's: equal,
// or exactly the expected difference listed for that step. used records
// which expected differences were seen.
func checkStep(t *testing.T, tgt string, i int, want, got string, used map[int]bool) bool {
	t.Helper()
	title, _, _ := strings.Cut(want, "\n")
	for k, d := range expectedDiffs {
		if d.target != tgt || d.step != title {
			continue
		}
		used[k] = true
		switch {
		case got == want:
			t.Errorf("step %d (%s) now prints what etcd prints; remove its expected difference (%s)", i+1, title, d.reason)
			return false
		case got != d.want:
			t.Errorf("step %d differs from etcd and from its expected difference (%s):\n--- expected %s\n%s--- %s\n%s--- etcd\n%s", i+1, d.reason, tgt, d.want, tgt, got, want)
			return false
		}
		t.Logf("step %d: expected difference from etcd: %s", i+1, d.reason)
		return true
	}
	if got != want {
		t.Errorf("step %d differs from etcd:\n--- etcd\n%s--- %s\n%s", i+1, want, tgt, got)
		return false
	}
	return true
}

// checkAllUsed fails for an expected difference of tgt whose step is not
// in the session any more.
func checkAllUsed(t *testing.T, tgt string, used map[int]bool) {
	t.Helper()
	for k, d := range expectedDiffs {
		if d.target == tgt && !used[k] {
			t.Errorf("expected difference for step %q is not in the session", d.step)
		}
	}
}
