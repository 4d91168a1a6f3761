package mvcc

import (
	"strconv"
	"sync"
	"testing"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
)

// A read of the live database while batches are committed must report
// the revision of exactly the state it read: every revision here rewrites
// key "k" (and only it), so the header revision must equal k's mod
// revision, whatever commit the read overlapped. Reading the counters and
// the key separately would let the key be newer than the header.
func TestRangeLatestHeaderMatchesStateUnderCommits(t *testing.T) {
	h := newHarness(t)
	h.mustApply(putReq("k", "0"))
	const writes = 3000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1; i <= writes; i++ {
			h.mustApply(putReq("k", strconv.Itoa(i)))
		}
	}()
	var reads, lastRev int64
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for {
		select {
		case <-done:
			if reads == 0 {
				t.Fatal("no read overlapped the writes")
			}
			resp, err := h.s.RangeLatest(h.db, &dkvpb.RangeRequest{Key: []byte("k")})
			if err != nil {
				t.Fatal(err)
			}
			if got := string(resp.Kvs[0].Value); got != strconv.Itoa(writes) {
				t.Fatalf("after the writes k = %q, want %d", got, writes)
			}
			return
		default:
		}
		resp, err := h.s.RangeLatest(h.db, &dkvpb.RangeRequest{Key: []byte("k")})
		if err != nil {
			t.Fatal(err)
		}
		reads++
		if len(resp.Kvs) != 1 {
			t.Fatalf("read %d: %d kvs, want 1", reads, len(resp.Kvs))
		}
		rev, mod := resp.GetHeader().GetRevision(), resp.Kvs[0].GetModRevision()
		if rev != mod {
			t.Fatalf("read %d: header revision %d but k was last modified at %d", reads, rev, mod)
		}
		if rev < lastRev {
			t.Fatalf("read %d: revision went back from %d to %d", reads, lastRev, rev)
		}
		lastRev = rev
	}
}
