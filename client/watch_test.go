package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
)

// next receives one batch or fails after a deadline.
func next(t *testing.T, w *client.Watch) client.WatchBatch {
	t.Helper()
	select {
	case b, ok := <-w.Events():
		if !ok {
			t.Fatalf("watch closed: %v", w.Err())
		}
		return b
	case <-time.After(10 * time.Second):
		t.Fatal("no watch batch within 10s")
	}
	return client.WatchBatch{}
}

func describe(b client.WatchBatch) string {
	var parts []string
	for _, e := range b.Events {
		s := fmt.Sprintf("%s %s", e.Type, e.KV.Key)
		if e.Type == client.EventPut {
			s += "=" + string(e.KV.Value)
		}
		if e.PrevKV != nil {
			s += " prev=" + string(e.PrevKV.Value)
		}
		parts = append(parts, s)
	}
	return fmt.Sprintf("@%d[%s]", b.Revision, strings.Join(parts, ", "))
}

func TestWatchSnapshotThenEventsEmbedded(t *testing.T) {
	c := sharedEmbedded(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c.Put(ctx, "jobs/1", []byte("a"))
	r, _ := c.Put(ctx, "jobs/2", []byte("b"))
	c.Put(ctx, "other", []byte("x"))

	w, err := c.WatchPrefix(ctx, "jobs/", client.WithInitialSnapshot(), client.WithPrevKV())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	init := w.Initial()
	if init == nil || len(init.KVs) != 2 || init.Revision != r.Revision+1 || w.StartRevision() != init.Revision+1 {
		t.Fatalf("initial %+v, start %d; want jobs/1 and jobs/2 at revision %d", init, w.StartRevision(), r.Revision+1)
	}
	c.Put(ctx, "jobs/1", []byte("a2"))
	c.Txn(ctx).Then(client.OpPut("jobs/3", []byte("c")), client.OpDelete("jobs/2")).Commit()
	c.Delete(ctx, "jobs/", client.WithPrefix())
	want := []string{
		fmt.Sprintf("@%d[PUT jobs/1=a2 prev=a]", init.Revision+1),
		fmt.Sprintf("@%d[PUT jobs/3=c, DELETE jobs/2 prev=b]", init.Revision+2),
		fmt.Sprintf("@%d[DELETE jobs/1 prev=a2, DELETE jobs/3 prev=c]", init.Revision+3),
	}
	for _, wnt := range want {
		if got := describe(next(t, w)); got != wnt {
			t.Fatalf("got %s, want %s", got, wnt)
		}
	}
	w.Stop()
	if _, ok := <-w.Events(); ok {
		t.Fatal("Events still open after Stop")
	}
	if w.Err() != nil {
		t.Fatalf("Err after Stop = %v, want nil", w.Err())
	}
}

func TestWatchStartRevisionAndCompaction(t *testing.T) {
	c := sharedEmbedded(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var revs []int64
	for i := 0; i < 10; i++ {
		r, err := c.Put(ctx, "compact/k", []byte(fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, r.Revision)
	}
	w, err := c.WatchKey(ctx, "compact/k", client.WithStartRevision(revs[3]))
	if err != nil {
		t.Fatal(err)
	}
	for i := 3; i < 10; i++ {
		if got := describe(next(t, w)); got != fmt.Sprintf("@%d[PUT compact/k=%d]", revs[i], i) {
			t.Fatalf("replay %d: %s", i, got)
		}
	}
	w.Stop()

	if err := c.Compact(ctx, revs[5]); err != nil {
		t.Fatal(err)
	}
	_, err = c.WatchKey(ctx, "compact/k", client.WithStartRevision(revs[4]))
	var ce *client.Error
	if !errors.Is(err, client.ErrCompacted) || !errors.As(err, &ce) || ce.Metadata["compact_revision"] != fmt.Sprint(revs[5]) {
		t.Fatalf("watch from compacted revision: %v, want ErrCompacted with compact_revision %d", err, revs[5])
	}
	// The compact revision itself can be watched, as it can be read.
	w, err = c.WatchKey(ctx, "compact/k", client.WithStartRevision(revs[5]))
	if err != nil {
		t.Fatalf("watch from the compact revision: %v", err)
	}
	if got := describe(next(t, w)); got != fmt.Sprintf("@%d[PUT compact/k=5]", revs[5]) {
		t.Fatalf("watch from the compact revision: %s", got)
	}
	w.Stop()
}

func TestWatchOptionsAndOnChange(t *testing.T) {
	c := sharedEmbedded(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.WatchKey(ctx, "k", client.WithLease(7)); !errors.Is(err, client.ErrInvalidInput) {
		t.Fatalf("WithLease on a watch: %v, want ErrInvalidInput", err)
	}
	if _, err := c.WatchKey(ctx, "b", client.WithRange("a")); !errors.Is(err, client.ErrInvalidInput) {
		t.Fatalf("inverted range: %v, want ErrInvalidInput", err)
	}

	w, err := c.WatchPrefix(ctx, "f/", client.WithFilterPuts(), client.WithProgressNotify(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	p := next(t, w)
	if len(p.Events) != 0 || p.Revision != w.StartRevision()-1 {
		t.Fatalf("progress %s, want an empty batch at %d", describe(p), w.StartRevision()-1)
	}

	got := make(chan client.WatchEvent, 10)
	octx, ocancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.OnChange(octx, "f/", func(e client.WatchEvent) { got <- e }) }()
	// OnChange has started once a write made after it shows up; retry
	// writes until then.
	deadline := time.After(10 * time.Second)
	var first client.WatchEvent
wait:
	for i := 0; ; i++ {
		c.Put(ctx, "f/x", []byte(fmt.Sprint(i)))
		select {
		case first = <-got:
			break wait
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatal("OnChange saw nothing")
		}
	}
	c.Delete(ctx, "f/x")
	for {
		e := <-got
		if e.Type == client.EventDelete {
			if e.Revision <= first.Revision {
				t.Fatalf("delete at %d not after put at %d", e.Revision, first.Revision)
			}
			break
		}
	}
	for b := next(t, w); len(b.Events) == 0; b = next(t, w) {
	}
	ocancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("OnChange returned %v, want context.Canceled", err)
	}
}

// TestWatchFromFutureRevision: the server reports its own revision in the
// created response of a watch from a future revision; the watch still
// starts where it was asked to and delivers nothing before.
func TestWatchFromFutureRevision(t *testing.T) {
	c := sharedEmbedded(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := c.Put(ctx, "future/k", []byte("0"))
	if err != nil {
		t.Fatal(err)
	}
	start := r.Revision + 3
	w, err := c.WatchKey(ctx, "future/k", client.WithStartRevision(start))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if w.StartRevision() != start || w.Revision() != start-1 {
		t.Fatalf("watch from %d: StartRevision %d, Revision %d", start, w.StartRevision(), w.Revision())
	}
	for i := 1; i <= 3; i++ {
		if _, err := c.Put(ctx, "future/k", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	if got := describe(next(t, w)); got != fmt.Sprintf("@%d[PUT future/k=3]", start) {
		t.Fatalf("first batch %s, want the put at %d", got, start)
	}
}
