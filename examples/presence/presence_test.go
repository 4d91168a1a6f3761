package main

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/dkv-io/dkv/server/embed"
)

// TestKilledNodeDisappears runs the scenario on an embedded store with a
// 1s TTL. The killed node (its session no longer kept alive, never
// deregistered) must leave by itself; the dashboard and every node still
// watching must see each join and leave, in order. The run's context
// bounds the wait for the leave; the time it took is logged, not
// asserted.
func TestKilledNodeDisappears(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	c, err := embed.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := run(ctx, c, options{ttl: time.Second, group: "t-presence", out: io.Discard})
	if err != nil {
		t.Fatal(err) // includes: node-3's leave never arrived, or arrived out of order
	}
	want := []string{
		"join node-1", "join node-2", "join node-3",
		"leave node-2", "leave node-3", "join node-4",
		"leave node-1", "leave node-4",
	}
	if !slices.Equal(res.dashboard, want) {
		t.Errorf("dashboard saw %q, want %q", res.dashboard, want)
	}
	// Each node's own watch saw the dashboard's changes from its own join
	// until it stopped watching (just before it left).
	for _, n := range []struct {
		id       string
		from, to int
	}{{"node-1", 0, 6}, {"node-2", 1, 3}, {"node-3", 2, 4}, {"node-4", 5, 7}} {
		id, from, to := n.id, n.from, n.to
		if got := res.seen[id]; !slices.Equal(got, want[from:to]) {
			t.Errorf("%s's watch saw %q, want %q", id, got, want[from:to])
		}
	}
	t.Logf("the killed node's leave arrived %v after the kill (TTL 1s)", res.killedGone)
}
