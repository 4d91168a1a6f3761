package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/examples/internal/exenv"
	"github.com/dkv-io/dkv/examples/internal/proctest"
)

// TestConsumerResumesAfterKill runs a consumer (--instance r1) as a
// process against three `dkv serve` processes while the test writes 300
// changes; the consumer is killed with kill -9 in the middle of the
// stream, while changes go on, and started again. From the store's
// handled/r1/ records (each written with the checkpoint): every change
// was handled exactly once, none missed. Then it is killed again, the
// changes after its checkpoint are compacted away, and started again:
// it says so and resyncs from a fresh snapshot. It stops cleanly on
// SIGTERM.
func TestConsumerResumesAfterKill(t *testing.T) {
	proctest.Skip(t)
	bin := proctest.Example(t, "react")
	_, cl, eps := proctest.Cluster(t)
	run := fmt.Sprintf("t%d", time.Now().UnixNano())
	p := "examples/react/" + run + "/"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	g := proctest.Start(t, bin, []string{"--endpoints", eps, "--run", run}, "r1")
	const wait = 60 * time.Second
	proctest.Wait(t, g, wait, "r1's first sync", 0, proctest.Is("synced", "r1"))

	// 300 changes, one at a time, some of them transactions of two;
	// r1 is killed after it has handled 100 and started again at once.
	const n = 300
	writes := map[int64]int{} // revision -> changes in it
	var last int64
	for i := range n {
		var rev int64
		if i%10 == 9 {
			res, err := cl.Txn(ctx).Then(
				client.OpPut(fmt.Sprintf("%sdata/k%03d", p, i), []byte(fmt.Sprint(i))),
				client.OpPut(fmt.Sprintf("%sdata/x%03d", p, i), []byte(fmt.Sprint(i)))).Commit()
			if err != nil {
				t.Fatal(err)
			}
			rev, writes[res.Revision] = res.Revision, 2
		} else {
			r, err := cl.Put(ctx, fmt.Sprintf("%sdata/k%03d", p, i%50), []byte(fmt.Sprint(i)))
			if err != nil {
				t.Fatal(err)
			}
			rev, writes[r.Revision] = r.Revision, 1
		}
		last = rev
		if i == 150 {
			_, e := proctest.Wait(t, g, wait, "r1 to handle 100 changes", 0, func(e exenv.Event) bool {
				return e.What == "handled" && e.Instance == "r1" && e.Int("n") >= 100
			})
			t.Logf("killing r1 (kill -9) after %s", e.Line)
			g.Instance("r1").Kill()
			if _, err := g.Start("r1"); err != nil {
				t.Fatal(err)
			}
		}
	}
	from := 0
	for i, e := range g.Events() {
		if e.What == "exited" {
			from = i
		}
	}
	_, res := proctest.Wait(t, g, wait, "r1 to resume", from, proctest.Is("resuming", "r1"))
	waitCheckpoint(t, ctx, cl, p, last)
	records := handled(t, ctx, cl, p)
	var missed, twice []string
	for rev, k := range writes {
		for i := range k {
			id := fmt.Sprintf("%d-%d", rev, i)
			switch v := records[id]; {
			case v == 0:
				missed = append(missed, id)
			case v > 1:
				twice = append(twice, id)
			}
		}
	}
	t.Logf("r1 resumed from %s; %d changes in %d revisions, handled records: %d", res.Get("from"), n+n/10, len(writes), len(records))
	if len(missed)+len(twice) > 0 {
		t.Errorf("changes (REV-I) missed: %v; handled twice: %v", missed, twice)
	}
	if len(records) != n+n/10+1 { // and the first sync
		t.Errorf("%d handled records, want %d changes and the first sync", len(records), n+n/10)
	}

	// Killed again; changes made meanwhile are compacted away.
	g.Instance("r1").Kill()
	var rev int64
	for i := range 5 {
		r, err := cl.Put(ctx, fmt.Sprintf("%sdata/late%d", p, i), []byte("x"))
		if err != nil {
			t.Fatal(err)
		}
		rev = r.Revision
	}
	if err := cl.Compact(ctx, rev); err != nil {
		t.Fatal(err)
	}
	at := g.Len()
	if _, err := g.Start("r1"); err != nil {
		t.Fatal(err)
	}
	_, comp := proctest.Wait(t, g, wait, "r1 to say its changes were compacted", at, proctest.Is("compacted", "r1"))
	_, synced := proctest.Wait(t, g, wait, "r1 to resync", at, proctest.Is("synced", "r1"))
	if comp.Int("from") != int(last)+1 || synced.Int("rev") < int(rev) {
		t.Errorf("after the compaction: %s, then %s; want from=%d, then a sync at %d or later", comp.Line, synced.Line, last+1, rev)
	}
	proctest.StopAll(t, g)
}

// waitCheckpoint waits until r1's checkpoint is at rev.
func waitCheckpoint(t *testing.T, ctx context.Context, cl *client.Client, p string, rev int64) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var got string
	err := exenv.WaitFor(wctx, func() (bool, error) {
		kv, err := cl.Get(wctx, p+"consumers/r1")
		if err == nil {
			got = string(kv.Value)
		}
		return got == fmt.Sprint(rev), nil
	})
	if err != nil {
		t.Fatalf("r1's checkpoint is %q, want %d: %v", got, rev, err)
	}
}

// handled maps each handled/r1/ record's id to how many times it was
// written (its version).
func handled(t *testing.T, ctx context.Context, cl *client.Client, p string) map[string]int64 {
	t.Helper()
	r, err := cl.List(ctx, p+"handled/r1/")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int64{}
	for _, kv := range r.KVs {
		m[strings.TrimPrefix(kv.Key, p+"handled/r1/")] = kv.Version
	}
	return m
}
