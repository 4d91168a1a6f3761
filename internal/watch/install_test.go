package watch

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/dkv-io/dkv/internal/keys"
	"github.com/dkv-io/dkv/internal/testutil"
)

// A watcher catching up from history while a raft snapshot is being
// installed must not read the half-replaced state: the install deletes
// the old state and writes the new one in several batches, and a catch-up
// read between them finds no change log for revisions that exist, moves
// the watcher past them, and their events are lost for good (the chaos
// suite saw a watcher from an old revision miss three events, most
// likely this way; the run was not reproduced).
func TestCatchUpWaitsForSnapshotInstall(t *testing.T) {
	e := newEnv(t, Config{CatchUpRevisions: 7})
	var last int64
	for i := 0; i < 40; i++ {
		last = e.apply(put(fmt.Sprintf("p/%d", i%5), fmt.Sprint(i)))
	}
	want := e.history(10, last, hasPrefix("p/"), false)

	// The install, half done: marker set, the state deleted, the new
	// state (here the same one) not yet written.
	var saved [][2][]byte
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: []byte("s/"), UpperBound: []byte("s0")})
	if err != nil {
		t.Fatal(err)
	}
	for it.First(); it.Valid(); it.Next() {
		saved = append(saved, [2][]byte{append([]byte(nil), it.Key()...), append([]byte(nil), it.Value()...)})
	}
	it.Close()
	if err := e.db.Set(keys.SnapshotInstalling, []byte("x"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := e.db.DeleteRange([]byte("s/"), []byte("s0"), pebble.Sync); err != nil {
		t.Fatal(err)
	}

	st := e.h.NewStream()
	defer st.Close()
	rd := startReader(t, st)
	w, _ := st.Add(Spec{Key: []byte("p/"), Prefix: true}, 10, nil)
	testutil.Eventually(t, 10*time.Second, "a catch-up pass over the half-installed state", func() bool {
		s := e.h.Stats()
		return s.CatchUps+s.InstallWaits > 0
	})

	// The install's last batch: the new state and the marker's delete.
	b := e.db.NewBatch()
	for _, kv := range saved {
		if err := b.Set(kv[0], kv[1], nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Delete(keys.SnapshotInstalling, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	b.Close()
	e.h.Reset(last)
	for i := 40; i < 45; i++ {
		last = e.apply(put(fmt.Sprintf("p/%d", i%5), fmt.Sprint(i)))
	}
	want = append(want, e.history(want[len(want)-1].rev+1, last, hasPrefix("p/"), false)...)
	testutil.Eventually(t, 10*time.Second, "every event from revision 10", func() bool { return len(events(t, rd.snapshot(), w.ID())) >= len(want) })
	equalEvs(t, "after the install", events(t, rd.snapshot(), w.ID()), want)
}
