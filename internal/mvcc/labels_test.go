package mvcc

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/keyrange"
)

func withLabels(ls map[string]string) func(*dkvpb.PutRequest) {
	return func(p *dkvpb.PutRequest) { p.Labels = ls }
}

// TestLabelsInHistory: labels are part of a version: a read at a past
// revision, prev_kv and events carry the labels of that version; a put
// without labels drops them unless ignore_labels.
func TestLabelsInHistory(t *testing.T) {
	h := newHarness(t)
	r1 := h.mustApply(putReq("k", "v1", withLabels(map[string]string{"state": "open", "customer": "42"})))
	if got := r1.Events[0].KV.Labels; got["state"] != "open" || got["customer"] != "42" {
		t.Fatalf("event labels %v", got)
	}
	r2 := h.mustApply(putReq("k", "v2", func(p *dkvpb.PutRequest) { p.IgnoreLabels, p.PrevKv = true, true }))
	if got := r2.Events[0].KV.Labels["state"]; got != "open" {
		t.Fatalf("ignore_labels lost the labels: %v", r2.Events[0].KV.Labels)
	}
	r3 := h.mustApply(putReq("k", "v3"))
	if r3.Events[0].PrevKV.Labels["customer"] != "42" {
		t.Fatalf("prev_kv labels %v", r3.Events[0].PrevKV.Labels)
	}
	if got := h.get("k").Labels; got != nil {
		t.Fatalf("a put without labels kept %v", got)
	}
	resp, err := h.rng(&dkvpb.RangeRequest{Key: []byte("k"), Revision: r1.Revision})
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Labels["state"] != "open" || string(resp.Kvs[0].Value) != "v1" {
		t.Fatalf("read at %d: %v %v", r1.Revision, resp, err)
	}
}

// TestUnlabelledRecordsUnchanged: a record without labels is encoded as
// before labels existed, so old data dirs and snapshots read the same.
func TestUnlabelledRecordsUnchanged(t *testing.T) {
	r := record{create: 2, mod: 3, version: 2, lease: 0, value: []byte("v")}
	if got := appendLatest(nil, &r); string(got) != "\x02\x03\x02\x00v" {
		t.Fatalf("latest %q", got)
	}
	if got := appendHistPut(nil, &r); string(got) != "\x01\x02\x02\x00v" {
		t.Fatalf("history %q", got)
	}
	r.labels = encodeLabels(map[string]string{"a": "b"})
	var back record
	if err := decodeLatest(appendLatest(nil, &r), &back); err != nil || back.create != 2 || string(back.value) != "v" || decodeLabels(back.labels)["a"] != "b" {
		t.Fatalf("labelled latest round trip: %+v %v", back, err)
	}
}

func labelCmp(key, label string, res dkvpb.Compare_CompareResult, u any) *dkvpb.Compare {
	c := &dkvpb.Compare{Key: []byte(key), Target: dkvpb.Compare_LABEL, Label: label, Result: res}
	switch v := u.(type) {
	case string:
		c.TargetUnion = &dkvpb.Compare_Value{Value: []byte(v)}
	case bool:
		c.TargetUnion = &dkvpb.Compare_Exists{Exists: v}
	}
	return c
}

func TestTxnCompareLabel(t *testing.T) {
	h := newHarness(t)
	h.mustApply(putReq("k", "v", withLabels(map[string]string{"state": "open"})))
	for _, c := range []struct {
		cmp  *dkvpb.Compare
		want bool
	}{
		{labelCmp("k", "state", dkvpb.Compare_EQUAL, "open"), true},
		{labelCmp("k", "state", dkvpb.Compare_EQUAL, "paid"), false},
		{labelCmp("k", "state", dkvpb.Compare_NOT_EQUAL, "paid"), true},
		{labelCmp("k", "state", dkvpb.Compare_GREATER, "a"), true},
		{labelCmp("k", "state", dkvpb.Compare_LESS, "a"), false},
		{labelCmp("k", "other", dkvpb.Compare_EQUAL, ""), false},     // absent is not ""
		{labelCmp("k", "other", dkvpb.Compare_NOT_EQUAL, "x"), true}, // absent differs
		{labelCmp("k", "other", dkvpb.Compare_LESS, "z"), false},
		{labelCmp("k", "state", dkvpb.Compare_EQUAL, true), true},
		{labelCmp("k", "other", dkvpb.Compare_EQUAL, false), true},
		{labelCmp("missing", "state", dkvpb.Compare_EQUAL, false), true},
		{labelCmp("missing", "state", dkvpb.Compare_EQUAL, "open"), false},
	} {
		res := h.mustApply(txnReq(&dkvpb.TxnRequest{Compare: []*dkvpb.Compare{c.cmp}}))
		if got := res.Resp.(*dkvpb.TxnResponse).Succeeded; got != c.want {
			t.Errorf("%v: succeeded %v, want %v", c.cmp, got, c.want)
		}
	}
}

func TestLabelLimits(t *testing.T) {
	many := map[string]string{}
	for i := 0; i <= MaxLabels; i++ {
		many[fmt.Sprintf("l%d", i)] = "v"
	}
	for _, c := range []struct {
		ls   map[string]string
		want string
	}{
		{many, "17 labels; the limit is 16"},
		{map[string]string{"prefix": "x"}, "reserved"},
		{map[string]string{strings.Repeat("n", 64): "x"}, "the limit is 63"},
		{map[string]string{"a b": "x"}, "names are [A-Za-z0-9_.-]"},
		{map[string]string{"a": strings.Repeat("v", 257)}, "the limit is 256"},
		{map[string]string{"a": "x y"}, "whitespace"},
		{map[string]string{"a": "x|y"}, "'|'"},
	} {
		err := ValidatePut(&dkvpb.PutRequest{Key: []byte("k"), Labels: c.ls}, Limits{})
		if codeOf(err) != dkverr.InvalidInput || !strings.Contains(err.Error(), c.want) {
			t.Errorf("labels %v: %v, want InvalidInput naming %q", c.ls, err, c.want)
		}
	}
}

func countKeys(t *testing.T, r pebble.Reader, prefix []byte) int {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: keyrange.PrefixEnd(prefix)})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	return n
}

func queryKeys(t *testing.T, h *harness, q string, rev int64) []string {
	t.Helper()
	pq, err := ParseQuery(q)
	if err != nil {
		t.Fatal(err)
	}
	res, err := h.s.Query(context.Background(), h.db, pq, QueryOptions{Revision: rev})
	if err != nil {
		t.Fatal(err)
	}
	return keyNames(res.KVs)
}

// TestIndexLeaseAndCompaction: a key deleted by its lease's revocation
// leaves the index at that revision; compaction prunes the index's
// history like the keys', and a query below it is Compacted.
func TestIndexLeaseAndCompaction(t *testing.T) {
	h := newHarness(t)
	h.mustApply(putReq("o/1", "v", withLabels(map[string]string{"state": "open"}), func(p *dkvpb.PutRequest) { p.Lease = 1 }))
	h.mustApply(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_IndexCreate{IndexCreate: &dkvpb.IndexCreateRequest{Prefix: []byte("o/"), Label: "state"}}})
	before := h.mustApply(putReq("o/2", "v", withLabels(map[string]string{"state": "open"}))).Revision
	h.mustApply(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseRevoke{LeaseRevoke: &dkvpb.LeaseRevokeRequest{Id: 1}}})
	if got := queryKeys(t, h, "prefix=o/ state=open", 0); fmt.Sprint(got) != "[o/2]" {
		t.Fatalf("after the lease's revocation: %v", got)
	}
	if got := queryKeys(t, h, "prefix=o/ state=open", before); fmt.Sprint(got) != "[o/1 o/2]" {
		t.Fatalf("before it: %v", got)
	}
	for i := 0; i < 5; i++ {
		h.mustApply(putReq("o/2", "v", withLabels(map[string]string{"state": []string{"paid", "open"}[i%2]})))
	}
	entries := countKeys(t, h.db, prefixIndexEntry)
	cur := h.s.Revision()
	h.mustApply(compactReq(cur))
	if err := h.s.PurgeHistory(h.db, cur); err != nil {
		t.Fatal(err)
	}
	// o/2 ends paid: one live entry is all a read at cur needs.
	if after := countKeys(t, h.db, prefixIndexEntry); after != 1 || entries <= after {
		t.Fatalf("index entries %d before the purge, %d after; want 1 after", entries, after)
	}
	if got := queryKeys(t, h, "prefix=o/ state=paid", 0); fmt.Sprint(got) != "[o/2]" {
		t.Fatalf("after the purge: %v", got)
	}
	pq, _ := ParseQuery("prefix=o/ state=open")
	if _, err := h.s.Query(context.Background(), h.db, pq, QueryOptions{Revision: before}); codeOf(err) != dkverr.Compacted {
		t.Fatalf("query below the compact revision: %v", err)
	}
}
