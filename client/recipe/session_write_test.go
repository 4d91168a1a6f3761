package recipe

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/server/embed"
)

// TestSessionWriteResolve: after an unknown outcome, resolve tells a
// write that applied from one that lost its condition to another and
// from one that can still apply, even once a later Update has deleted
// the marker (it then reads the history), and says it cannot know once
// that history is compacted.
func TestSessionWriteResolve(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := embed.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := NewSessionStore(c)
	if err != nil {
		t.Fatal(err)
	}
	set := func(v string) func([]byte) ([]byte, error) {
		return func([]byte) ([]byte, error) { return []byte(v), nil }
	}
	if _, err := s.Update(ctx, "t", set("1")); err != nil {
		t.Fatal(err)
	}
	kv, err := c.Get(ctx, "dkv.session/t")
	if err != nil {
		t.Fatal(err)
	}
	marker := s.markerDir + "t"
	mine := &sessionWrite{key: kv.Key, marker: marker, data: []byte("2"), cond: kv.ModRevision, lease: kv.Lease, id: newWriteID()}
	theirs := *mine
	theirs.id = newWriteID()
	// mine applies, but (say) its reply is lost.
	if err := s.commit(ctx, mine); err != nil {
		t.Fatal(err)
	}
	check := func(w *sessionWrite, want writeOutcome, what string) {
		t.Helper()
		got, err := s.resolve(ctx, w)
		if err != nil || got != want {
			t.Fatalf("%s: resolve = %v, %v; want %v", what, got, err, want)
		}
	}
	check(mine, writeApplied, "marker present")
	check(&theirs, writeLost, "marker names another write")
	// A later Update replaces mine's marker; the history still tells.
	if _, err := s.Update(ctx, "t", set("3")); err != nil {
		t.Fatal(err)
	}
	if rr, _ := c.List(ctx, s.markerDir); len(rr.KVs) != 1 {
		t.Fatalf("%d markers for one session, want one", len(rr.KVs))
	}
	check(mine, writeApplied, "marker replaced by a later Update")
	check(&theirs, writeLost, "marker replaced, another write won")
	now, err := c.Get(ctx, "dkv.session/t")
	if err != nil {
		t.Fatal(err)
	}
	pending := &sessionWrite{key: now.Key, marker: marker, data: []byte("4"), cond: now.ModRevision, lease: now.Lease, id: newWriteID()}
	check(pending, writePending, "condition still holds")

	// A plain Put (no marker) moves the session on: lost, not applied.
	if _, err := c.Put(ctx, now.Key, []byte("5"), client.WithLease(now.Lease)); err != nil {
		t.Fatal(err)
	}
	check(pending, writeLost, "a plain Put came first")

	// A create: the condition is the session's absence at the read's
	// revision.
	rr, err := c.Range(ctx, "dkv.session/new")
	if err != nil || len(rr.KVs) != 0 {
		t.Fatalf("range: %v, %v", rr, err)
	}
	g, err := c.Grant(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	created := &sessionWrite{key: "dkv.session/new", marker: s.markerDir + "new", data: []byte("1"), create: true, cond: rr.Revision, lease: g.ID, id: newWriteID()}
	other := *created
	other.id = newWriteID()
	check(created, writePending, "create not sent yet")
	if err := s.commit(ctx, created); err != nil {
		t.Fatal(err)
	}
	if err := s.commit(ctx, &other); !errors.Is(err, errWriteLost) {
		t.Fatalf("a second create: %v, want errWriteLost", err)
	}
	check(created, writeApplied, "create, marker present")
	check(&other, writeLost, "create, another write won")
	if _, err := s.Update(ctx, "new", set("2")); err != nil {
		t.Fatal(err)
	}
	check(created, writeApplied, "create, marker replaced by a later Update")

	// With the history compacted, the outcome cannot be known.
	last, err := c.Put(ctx, "other", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Compact(ctx, last.Revision); err != nil {
		t.Fatal(err)
	}
	if _, err := s.resolve(ctx, mine); !errors.Is(err, client.ErrUnknownOutcome) {
		t.Fatalf("resolve after compaction = %v, want ErrUnknownOutcome", err)
	}
}
