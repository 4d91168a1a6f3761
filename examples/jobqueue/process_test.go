package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client/recipe"
	"github.com/dkv-io/dkv/examples/internal/exenv"
	"github.com/dkv-io/dkv/examples/internal/proctest"
	"github.com/dkv-io/dkv/internal/testutil"
)

// TestProcessConsumersKilledMidJob runs three consumers as processes of
// their own against three `dkv serve` processes: 10 invoices, a 2 s
// visibility timeout, 2 s of work per job (charge the card, then send
// the receipt, then ack). One consumer is killed with SIGKILL just after
// it claimed a job (before charging), another just after it charged one
// (before acking). The last consumer finishes: every job is done, none
// is lost (each invoice has its charge, the queue is empty, the
// dead-letter list too) and none is charged twice (each charge key
// written once; the job whose consumer died after charging is found
// charged by its next attempt, which only acks).
func TestProcessConsumersKilledMidJob(t *testing.T) {
	proctest.Skip(t)
	bin := proctest.Example(t, "jobqueue")
	_, cl, eps := proctest.Cluster(t)
	const n = 10
	run := fmt.Sprintf("t%d", time.Now().UnixNano())
	args := []string{"--endpoints", eps, "--run", run, "--visibility", "2s", "--work", "2s"}
	grp := proctest.Start(t, bin, args)
	if _, err := grp.Start("w1", "--enqueue", fmt.Sprint(n)); err != nil {
		t.Fatal(err)
	}
	const wait = 60 * time.Second
	proctest.Wait(t, grp, wait, "the jobs enqueued", 0, proctest.Is("enqueued", "w1"))
	for _, name := range []string{"w2", "w3"} {
		if _, err := grp.Start(name); err != nil {
			t.Fatal(err)
		}
	}
	i, _ := proctest.Wait(t, grp, wait, "a job done", 0, proctest.Is("done", ""))

	// Killed before charging: the job comes back after the visibility
	// timeout; it must not be lost.
	_, claimed := proctest.Wait(t, grp, wait, "a job claimed", i+1, proctest.Is("claimed", ""))
	a := grp.Instance(claimed.Instance)
	t.Logf("kill -9 %s, which just claimed %s", a, claimed.Get("job"))
	a.Kill()

	// Killed after charging, before acking: the job comes back; its
	// charge must not be made again.
	_, charged := proctest.Wait(t, grp, wait, "a job charged", grp.Len(), proctest.Is("charged", ""))
	b := grp.Instance(charged.Instance)
	jb := charged.Get("job")
	t.Logf("kill -9 %s, which just charged %s", b, jb)
	b.Kill()

	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	defer cancel()
	q, err := recipe.NewQueue(cl, "examples-jobqueue-"+run)
	if err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyNoError(t, 2*wait, "the queue empty", func(ctx context.Context) error {
		st, err := q.Stats(ctx)
		if err == nil && st.Visible+st.Claimed+st.Scheduled != 0 {
			err = fmt.Errorf("%d visible, %d claimed, %d scheduled", st.Visible, st.Claimed, st.Scheduled)
		}
		return err
	})
	proctest.StopAll(t, grp)

	st, err := q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Dead != 0 {
		t.Errorf("%d jobs dead-lettered, want none", st.Dead)
	}
	prefix := "examples/jobqueue/" + run + "/results/"
	r, err := cl.List(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	charges := map[string]int64{}
	for _, kv := range r.KVs {
		charges[strings.TrimPrefix(kv.Key, prefix)] = kv.Version
	}
	for i := 1; i <= n; i++ {
		job := fmt.Sprintf("invoice-%d", i)
		switch v := charges[job]; {
		case v == 0:
			t.Errorf("%s was never charged: the job was lost%s", job, proctest.Describe(grp, jobIs(job)))
		case v > 1:
			t.Errorf("%s was charged %d times%s", job, v, proctest.Describe(grp, jobIs(job)))
		}
	}
	if len(charges) != n {
		t.Errorf("%d charges, want %d", len(charges), n)
	}
	if _, _, acked := grp.Find(0, func(e exenv.Event) bool { return e.What == "done" && e.Get("job") == jb && e.Instance == b.Name }); acked {
		t.Logf("%s acked %s before the kill took hold: its second delivery was not played", b, jb)
	} else if _, _, ok := grp.Find(0, func(e exenv.Event) bool { return e.What == "already-charged" && e.Get("job") == jb }); !ok {
		t.Errorf("%s, charged by %s before it was killed, was not found charged by its next attempt:%s", jb, b, proctest.Describe(grp, jobIs(jb)))
	}
}

func jobIs(job string) func(exenv.Event) bool {
	return func(e exenv.Event) bool { return e.Get("job") == job }
}
