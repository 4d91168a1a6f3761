package proc

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dkv-io/dkv/examples/internal/exenv"
	"github.com/dkv-io/dkv/internal/testutil"
)

// script is a stand-in instance: sh run with --instance NAME as $1 $2.
// It prints an event line, a line that is not one, and waits; SIGTERM
// makes it print "stopped" and exit 0.
const script = `trap 'echo "12:00:00.000 $2[$$] stopped"; exit 0' TERM
echo "12:00:00.000 $2[$$] started n=1"
echo "not an event"
while :; do sleep 0.05; done`

func TestGroupFollowsEventsAndSignals(t *testing.T) {
	var out testutil.LockedBuffer
	g := &Group{Bin: "/bin/sh", Args: []string{"-c", script, "sh"}, LogDir: t.TempDir(), Out: &out}
	defer g.KillAll()
	a, err := g.Start("a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := g.Start("b")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, in := range []*Instance{a, b} {
		_, e, err := g.Wait(ctx, 0, func(e exenv.Event) bool { return e.What == "started" && e.Instance == in.Name })
		if err != nil {
			t.Fatalf("%s's started event: %v", in, err)
		}
		if e.PID != in.PID() || e.Int("n") != 1 {
			t.Errorf("%s's event: %+v", in, e)
		}
	}
	testutil.Eventually(t, 30*time.Second, "the non-event lines, prefixed", func() bool {
		return strings.Contains(out.String(), a.String()+" | not an event") && strings.Contains(out.String(), b.String()+" | not an event")
	})

	at := g.Len()
	a.Kill()
	if _, e, ok := g.Find(at, func(e exenv.Event) bool { return e.What == "exited" && e.Instance == "a" }); !ok || !strings.Contains(e.Get("status"), "killed") {
		t.Errorf("after Kill: %+v, %v; want an exited event with the signal", e, ok)
	}
	if a.Running() || g.Instance("a") != a {
		t.Errorf("after Kill: running %v", a.Running())
	}

	if err := b.Freeze(); err != nil {
		t.Fatal(err)
	}
	// A frozen instance still stops on SIGTERM: Stop continues it.
	if bad := g.StopAll(20 * time.Second); len(bad) != 0 {
		t.Fatalf("StopAll: %v did not stop cleanly: %v", bad, bad[0].Err())
	}
	if _, _, ok := g.Find(0, func(e exenv.Event) bool { return e.What == "stopped" && e.Instance == "b" }); !ok {
		t.Errorf("b did not print stopped on SIGTERM:\n%s", b.LogTail(10))
	}
	if !strings.Contains(b.LogTail(10), "exited status=0") {
		t.Errorf("b's log does not end with its exit:\n%s", b.LogTail(10))
	}
	done, stop := context.WithCancel(ctx)
	stop()
	if _, e, err := g.Wait(done, g.Len(), func(exenv.Event) bool { return true }); err == nil {
		t.Errorf("Wait past the last event, its ctx ended: %+v, want ctx's error", e)
	}
}
