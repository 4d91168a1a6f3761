package main

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/dkv-io/dkv/examples/internal/exenv"
	"github.com/dkv-io/dkv/server/embed"
)

// TestWatchReactsToEveryChangeWithFewerReads runs the scenario on an
// embedded store with a fast poll loop, and cuts both watches halfway (the
// fault: a lost connection). Every change must be reacted to, exactly
// once, by both approaches: the cut watches resume without a gap or a
// repeat. The read counts are compared only
// where the relation is structural: the watch approach opens two watches,
// and two more when they are cut, and reads nothing else, whatever the
// number of changes; the poll loop reacts to a change only from a list
// that returned after the change was made, and the writer makes the next
// change only after both reacted, so no list serves two changes: at least
// one list per change. Latency is measured and logged, not asserted.
func TestWatchReactsToEveryChangeWithFewerReads(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	c, err := embed.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const changes = 12
	out := io.Writer(io.Discard)
	if testing.Verbose() {
		out = exenv.TestWriter(t.Logf)
	}
	res, err := run(ctx, c, options{changes: changes, poll: 50 * time.Millisecond, seed: 7, cutAt: changes / 2, prefix: "t/react/", out: out})
	if err != nil {
		t.Fatal(err)
	}
	for a, name := range approachName {
		for i, n := range res.reactions[a] {
			if n != 1 {
				t.Errorf("%s reacted %d times to change %d, want exactly once", name, n, i)
			}
		}
	}
	if res.reads[watch] != 4 {
		t.Errorf("watch approach made %d reads, want 4 (a snapshot per watch and a resume after the cut, whatever the number of changes)", res.reads[watch])
	}
	if res.reads[poll] < changes {
		t.Errorf("poll approach made %d reads for %d changes, want at least one list per change", res.reads[poll], changes)
	}
	t.Logf("reads: watch %d, poll %d; median latency: watch %v, poll %v",
		res.reads[watch], res.reads[poll], percentile(res.latency[watch], 50), percentile(res.latency[poll], 50))
}
