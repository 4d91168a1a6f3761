package mvcc

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"google.golang.org/protobuf/proto"
)

func TestEmptyStore(t *testing.T) {
	h := newHarness(t)
	// As in etcd: an empty store is at revision 1.
	if h.s.Revision() != 1 || h.s.CompactRevision() != 0 {
		t.Fatalf("revision %d compact %d, want 1 0", h.s.Revision(), h.s.CompactRevision())
	}
	resp, err := h.rng(&dkvpb.RangeRequest{Prefix: true})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Revision != 1 || resp.Count != 0 || len(resp.Kvs) != 0 {
		t.Fatalf("empty store range: %v", resp)
	}
}

func TestPutBasics(t *testing.T) {
	h := newHarness(t)
	res := h.mustApply(putReq("a", "1", func(p *dkvpb.PutRequest) { p.Lease = 7 }))
	if res.Revision != 2 || res.Resp.(*dkvpb.PutResponse).Header.Revision != 2 {
		t.Fatalf("first put revision %d, want 2", res.Revision)
	}
	want := &dkvpb.KeyValue{Key: []byte("a"), Value: []byte("1"), CreateRevision: 2, ModRevision: 2, Version: 1, Lease: 7}
	if got := h.get("a"); !proto.Equal(got, want) {
		t.Fatalf("get a = %v, want %v", got, want)
	}
	if len(res.Events) != 1 || res.Events[0].Type != EventPut || !proto.Equal(res.Events[0].KV, want) || res.Events[0].PrevKV != nil {
		t.Fatalf("events %v", res.Events)
	}

	res = h.mustApply(putReq("a", "2", func(p *dkvpb.PutRequest) { p.PrevKv = true }))
	pr := res.Resp.(*dkvpb.PutResponse)
	if !proto.Equal(pr.PrevKv, want) {
		t.Fatalf("prev_kv %v, want %v", pr.PrevKv, want)
	}
	want2 := &dkvpb.KeyValue{Key: []byte("a"), Value: []byte("2"), CreateRevision: 2, ModRevision: 3, Version: 2}
	if got := h.get("a"); !proto.Equal(got, want2) {
		t.Fatalf("get a = %v, want %v", got, want2)
	}
	if !proto.Equal(res.Events[0].PrevKV, want) {
		t.Fatalf("event prev %v", res.Events[0].PrevKV)
	}
	// Without prev_kv the response carries none.
	res = h.mustApply(putReq("a", "3"))
	if res.Resp.(*dkvpb.PutResponse).PrevKv != nil {
		t.Fatal("prev_kv returned without being asked for")
	}
}

func TestPutConditions(t *testing.T) {
	h := newHarness(t)
	h.mustApply(putReq("k", "v1")) // rev 2
	h.mustApply(putReq("k", "v2")) // rev 3, version 2
	tests := []struct {
		name string
		req  *dkvpb.InternalRequest
		code dkverr.Code
	}{
		{"if_absent on existing", putReq("k", "x", func(p *dkvpb.PutRequest) { p.IfAbsent = true }), dkverr.Conflict},
		{"if_absent on missing", putReq("new", "x", func(p *dkvpb.PutRequest) { p.IfAbsent = true }), dkverr.OK},
		{"if_version wrong", putReq("k", "x", func(p *dkvpb.PutRequest) { p.IfVersion = 1 }), dkverr.Conflict},
		{"if_version on missing", putReq("nope", "x", func(p *dkvpb.PutRequest) { p.IfVersion = 1 }), dkverr.Conflict},
		{"if_version right", putReq("k", "v3", func(p *dkvpb.PutRequest) { p.IfVersion = 2 }), dkverr.OK},
		{"if_mod_revision wrong", putReq("k", "x", func(p *dkvpb.PutRequest) { p.IfModRevision = 3 }), dkverr.Conflict},
		{"if_mod_revision right", putReq("k", "v4", func(p *dkvpb.PutRequest) { p.IfModRevision = 5 }), dkverr.OK},
		{"ignore_value on missing", putReq("nope", "", func(p *dkvpb.PutRequest) { p.IgnoreValue = true }), dkverr.InvalidInput},
		{"ignore_value with value", putReq("k", "x", func(p *dkvpb.PutRequest) { p.IgnoreValue = true }), dkverr.InvalidInput},
	}
	for _, tc := range tests {
		before := h.s.Revision()
		res := h.apply(tc.req)
		if got := codeOf(res.Err); got != tc.code {
			t.Fatalf("%s: got %v (%v), want %v", tc.name, got, res.Err, tc.code)
		}
		if tc.code != dkverr.OK && (h.s.Revision() != before || res.Revision != before || res.Events != nil) {
			t.Fatalf("%s: refused put advanced revision or emitted events", tc.name)
		}
	}
	// ignore_value keeps the value and takes the new lease.
	h.mustApply(putReq("k", "", func(p *dkvpb.PutRequest) { p.IgnoreValue = true; p.Lease = 9 }))
	if kv := h.get("k"); string(kv.Value) != "v4" || kv.Lease != 9 || kv.Version != 5 {
		t.Fatalf("after ignore_value: %v", kv)
	}
	res := h.apply(putReq("k", "x", func(p *dkvpb.PutRequest) { p.IfVersion = 1 }))
	if !strings.Contains(res.Err.Error(), `key "k" has version 5, not 1`) {
		t.Fatalf("conflict message %q", res.Err)
	}
}

func TestDeleteAndRecreate(t *testing.T) {
	h := newHarness(t)
	h.mustApply(putReq("a", "1"))
	h.mustApply(putReq("a", "2"))
	res := h.mustApply(delReq(&dkvpb.DeleteRangeRequest{Key: []byte("a"), PrevKv: true}))
	dr := res.Resp.(*dkvpb.DeleteRangeResponse)
	if dr.Deleted != 1 || len(dr.PrevKvs) != 1 || string(dr.PrevKvs[0].Value) != "2" || res.Revision != 4 {
		t.Fatalf("delete: %v rev %d", dr, res.Revision)
	}
	ev := res.Events[0]
	if ev.Type != EventDelete || string(ev.KV.Key) != "a" || ev.KV.ModRevision != 4 || ev.PrevKV.Version != 2 {
		t.Fatalf("delete event %+v", ev)
	}
	if h.get("a") != nil {
		t.Fatal("deleted key still visible")
	}
	// Deleting nothing is not a write.
	res = h.mustApply(delReq(&dkvpb.DeleteRangeRequest{Key: []byte("a")}))
	if res.Revision != 4 || res.Resp.(*dkvpb.DeleteRangeResponse).Deleted != 0 || res.Resp.(*dkvpb.DeleteRangeResponse).Header.Revision != 4 {
		t.Fatalf("no-op delete: %v rev %d", res.Resp, res.Revision)
	}
	h.mustApply(putReq("a", "new"))
	kv := h.get("a")
	if kv.Version != 1 || kv.CreateRevision != 5 || kv.ModRevision != 5 {
		t.Fatalf("recreated key %v, want version 1 create 5", kv)
	}
}

func TestDeleteRangeForms(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  *dkvpb.DeleteRangeRequest
		left []string
	}{
		{"single", &dkvpb.DeleteRangeRequest{Key: []byte("b")}, []string{"a", "b/1", "b/2", "c"}},
		{"range", &dkvpb.DeleteRangeRequest{Key: []byte("b"), RangeEnd: []byte("c")}, []string{"a", "c"}},
		{"from key", &dkvpb.DeleteRangeRequest{Key: []byte("b/1"), RangeEnd: []byte{0}}, []string{"a", "b"}},
		{"prefix", &dkvpb.DeleteRangeRequest{Key: []byte("b/"), Prefix: true}, []string{"a", "b", "c"}},
		{"everything", &dkvpb.DeleteRangeRequest{Prefix: true}, nil},
		{"empty key to end", &dkvpb.DeleteRangeRequest{RangeEnd: []byte("b/")}, []string{"b/1", "b/2", "c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			for _, k := range []string{"a", "b", "b/1", "b/2", "c"} {
				h.mustApply(putReq(k, "v"))
			}
			res := h.mustApply(delReq(tc.req))
			if res.Revision != 7 {
				t.Fatalf("revision %d, want 7 (one per delete request)", res.Revision)
			}
			all, _ := h.rng(&dkvpb.RangeRequest{Prefix: true})
			if got := keyNames(all.Kvs); !reflect.DeepEqual(got, tc.left) {
				t.Fatalf("left %q, want %q", got, tc.left)
			}
			if d := res.Resp.(*dkvpb.DeleteRangeResponse).Deleted; d != int64(5-len(tc.left)) || len(res.Events) != int(d) {
				t.Fatalf("deleted %d, events %d", d, len(res.Events))
			}
		})
	}
}

func TestDeleteIfVersion(t *testing.T) {
	h := newHarness(t)
	h.mustApply(putReq("a", "1"))
	h.mustApply(putReq("a", "2"))
	wantCode(t, h.apply(delReq(&dkvpb.DeleteRangeRequest{Key: []byte("a"), IfVersion: 1})).Err, dkverr.Conflict)
	wantCode(t, h.apply(delReq(&dkvpb.DeleteRangeRequest{Key: []byte("zz"), IfVersion: 1})).Err, dkverr.Conflict)
	wantCode(t, h.apply(delReq(&dkvpb.DeleteRangeRequest{Key: []byte("a"), Prefix: true, IfVersion: 2})).Err, dkverr.InvalidInput)
	if h.s.Revision() != 3 {
		t.Fatal("refused deletes advanced the revision")
	}
	h.mustApply(delReq(&dkvpb.DeleteRangeRequest{Key: []byte("a"), IfVersion: 2}))
	if h.get("a") != nil {
		t.Fatal("not deleted")
	}
}

func TestRangeForms(t *testing.T) {
	h := newHarness(t)
	all := []string{"", "a", "a\x00", "a\x00b", "ab", "b", "b\xff", "c"}
	for i, k := range all[1:] {
		h.mustApply(putReq(k, fmt.Sprint(i)))
	}
	for _, tc := range []struct {
		name string
		req  *dkvpb.RangeRequest
		want []string
	}{
		{"single", &dkvpb.RangeRequest{Key: []byte("ab")}, []string{"ab"}},
		{"single missing", &dkvpb.RangeRequest{Key: []byte("zz")}, nil},
		{"range", &dkvpb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("b")}, []string{"a", "a\x00", "a\x00b", "ab"}},
		{"range with nul", &dkvpb.RangeRequest{Key: []byte("a\x00"), RangeEnd: []byte("ab")}, []string{"a\x00", "a\x00b"}},
		{"from key", &dkvpb.RangeRequest{Key: []byte("b"), RangeEnd: []byte{0}}, []string{"b", "b\xff", "c"}},
		{"prefix", &dkvpb.RangeRequest{Key: []byte("a"), Prefix: true}, []string{"a", "a\x00", "a\x00b", "ab"}},
		{"prefix nul", &dkvpb.RangeRequest{Key: []byte("a\x00"), Prefix: true}, []string{"a\x00", "a\x00b"}},
		{"prefix 0xff", &dkvpb.RangeRequest{Key: []byte("b\xff"), Prefix: true}, []string{"b\xff"}},
		{"whole keyspace", &dkvpb.RangeRequest{Prefix: true}, all[1:]},
		{"empty key to b", &dkvpb.RangeRequest{RangeEnd: []byte("a\x00")}, []string{"a"}},
		{"empty range", &dkvpb.RangeRequest{Key: []byte("b"), RangeEnd: []byte("b")}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, rev := range []int64{0, 8, 7} {
				req := proto.Clone(tc.req).(*dkvpb.RangeRequest)
				req.Revision = rev
				resp, err := h.rng(req)
				if err != nil {
					t.Fatal(err)
				}
				want := tc.want
				if rev == 7 { // "c" was written at revision 8
					want = without(want, "c")
				}
				if got := keyNames(resp.Kvs); !reflect.DeepEqual(got, want) || resp.Count != int64(len(want)) {
					t.Fatalf("rev %d: got %q count %d, want %q", rev, got, resp.Count, want)
				}
				wantRev := rev
				if rev == 0 {
					wantRev = 8
				}
				if resp.Header.Revision != wantRev {
					t.Fatalf("header revision %d, want %d", resp.Header.Revision, wantRev)
				}
			}
		})
	}
}

func without(ss []string, x string) []string {
	var out []string
	for _, s := range ss {
		if s != x {
			out = append(out, s)
		}
	}
	return out
}

func TestRangeOptions(t *testing.T) {
	h := newHarness(t)
	// key: value, written in this order (revisions 2..5), then "b" again.
	h.mustApply(putReq("a", "3"))
	h.mustApply(putReq("b", "1"))
	h.mustApply(putReq("c", "2"))
	h.mustApply(putReq("d", "1"))
	h.mustApply(putReq("b", "9")) // b: version 2, mod 6
	base := func() *dkvpb.RangeRequest { return &dkvpb.RangeRequest{Prefix: true} }
	for _, tc := range []struct {
		name  string
		mod   func(*dkvpb.RangeRequest)
		want  []string
		more  bool
		count int64
	}{
		{"limit", func(r *dkvpb.RangeRequest) { r.Limit = 2 }, []string{"a", "b"}, true, 4},
		{"limit exact", func(r *dkvpb.RangeRequest) { r.Limit = 4 }, []string{"a", "b", "c", "d"}, false, 4},
		{"count only", func(r *dkvpb.RangeRequest) { r.CountOnly = true; r.Limit = 1 }, nil, false, 4},
		{"descend key", func(r *dkvpb.RangeRequest) { r.SortOrder = dkvpb.RangeRequest_DESCEND; r.Limit = 3 }, []string{"d", "c", "b"}, true, 4},
		{"ascend value", func(r *dkvpb.RangeRequest) {
			r.SortOrder = dkvpb.RangeRequest_ASCEND
			r.SortTarget = dkvpb.RangeRequest_VALUE
		}, []string{"d", "c", "a", "b"}, false, 4},
		{"value, keys only, limit", func(r *dkvpb.RangeRequest) {
			r.SortTarget = dkvpb.RangeRequest_VALUE // NONE + non-key target = ascending
			r.KeysOnly = true
			r.Limit = 1
		}, []string{"d"}, true, 4},
		{"descend mod", func(r *dkvpb.RangeRequest) {
			r.SortOrder = dkvpb.RangeRequest_DESCEND
			r.SortTarget = dkvpb.RangeRequest_MOD
		}, []string{"b", "d", "c", "a"}, false, 4},
		{"descend version, ties by key", func(r *dkvpb.RangeRequest) {
			r.SortOrder = dkvpb.RangeRequest_DESCEND
			r.SortTarget = dkvpb.RangeRequest_VERSION
		}, []string{"b", "a", "c", "d"}, false, 4},
		{"ascend create", func(r *dkvpb.RangeRequest) {
			r.SortOrder = dkvpb.RangeRequest_ASCEND
			r.SortTarget = dkvpb.RangeRequest_CREATE
			r.Revision = 5
		}, []string{"a", "b", "c", "d"}, false, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := base()
			tc.mod(req)
			resp, err := h.rng(req)
			if err != nil {
				t.Fatal(err)
			}
			if got := keyNames(resp.Kvs); !reflect.DeepEqual(got, tc.want) || resp.More != tc.more || resp.Count != tc.count {
				t.Fatalf("got %q more %v count %d; want %q more %v count %d", got, resp.More, resp.Count, tc.want, tc.more, tc.count)
			}
			for _, kv := range resp.Kvs {
				if req.KeysOnly && kv.Value != nil {
					t.Fatalf("keys_only returned value for %q", kv.Key)
				}
				if !req.KeysOnly && len(kv.Value) == 0 {
					t.Fatalf("value missing for %q", kv.Key)
				}
			}
		})
	}
}

func TestRangeRevisionErrors(t *testing.T) {
	h := newHarness(t)
	for i := 0; i < 5; i++ {
		h.mustApply(putReq("k", fmt.Sprint(i)))
	}
	_, err := h.rng(&dkvpb.RangeRequest{Key: []byte("k"), Revision: 7})
	wantCode(t, err, dkverr.InvalidInput)
	if !strings.Contains(err.Error(), "revision 7 is in the future (current 6)") {
		t.Fatalf("message %q", err)
	}
	h.mustApply(compactReq(4))
	_, err = h.rng(&dkvpb.RangeRequest{Key: []byte("k"), Revision: 3})
	wantCode(t, err, dkverr.Compacted)
	if err.(*dkverr.Error).Metadata["compact_revision"] != "4" {
		t.Fatalf("metadata %v", err.(*dkverr.Error).Metadata)
	}
	resp, err := h.rng(&dkvpb.RangeRequest{Key: []byte("k"), Revision: 4})
	if err != nil || string(resp.Kvs[0].Value) != "2" {
		t.Fatalf("read at compact revision: %v %v", resp, err)
	}
	_, err = h.rng(&dkvpb.RangeRequest{Key: []byte("k"), Revision: -1})
	wantCode(t, err, dkverr.InvalidInput)
}

func TestHistoryReads(t *testing.T) {
	h := newHarness(t)
	h.mustApply(putReq("a", "a1"))                                   // 2
	h.mustApply(putReq("b", "b1"))                                   // 3
	h.mustApply(putReq("a", "a2"))                                   // 4
	h.mustApply(delReq(&dkvpb.DeleteRangeRequest{Key: []byte("b")})) // 5
	h.mustApply(putReq("b", "b2"))                                   // 6
	h.mustApply(delReq(&dkvpb.DeleteRangeRequest{Key: []byte("a")})) // 7
	want := map[int64]string{
		1: "", // the empty store
		2: "a=a1/2/2/1",
		3: "a=a1/2/2/1 b=b1/3/3/1",
		4: "a=a2/2/4/2 b=b1/3/3/1",
		5: "a=a2/2/4/2",
		6: "a=a2/2/4/2 b=b2/6/6/1",
		7: "b=b2/6/6/1",
	}
	check := func(from int64) {
		t.Helper()
		for rev := from; rev <= 7; rev++ {
			resp, err := h.rng(&dkvpb.RangeRequest{Prefix: true, Revision: rev})
			if err != nil {
				t.Fatal(err)
			}
			if got := fmtKVs(resp.Kvs); got != want[rev] {
				t.Fatalf("rev %d: got %q want %q", rev, got, want[rev])
			}
		}
	}
	check(1)
	h.mustApply(compactReq(5))
	if err := h.s.PurgeHistory(h.db, 5); err != nil {
		t.Fatal(err)
	}
	check(5)
	// Only the versions visible at >= 5 remain: a@4 (live at 5), b@6, a@7 tombstone.
	var n int
	it, _ := h.db.NewIter(nil)
	for it.First(); it.Valid(); it.Next() {
		if strings.HasPrefix(string(it.Key()), "s/mh/") {
			n++
		}
	}
	it.Close()
	if n != 3 {
		t.Fatalf("%d history records after purge, want 3", n)
	}
}

func fmtKVs(kvs []*dkvpb.KeyValue) string {
	var parts []string
	for _, kv := range kvs {
		parts = append(parts, fmt.Sprintf("%s=%s/%d/%d/%d", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version))
	}
	return strings.Join(parts, " ")
}

func TestCompact(t *testing.T) {
	h := newHarness(t)
	h.mustApply(putReq("a", "1"))
	h.mustApply(putReq("a", "2"))
	wantCode(t, h.apply(compactReq(4)).Err, dkverr.InvalidInput)
	wantCode(t, h.apply(compactReq(0)).Err, dkverr.InvalidInput)
	res := h.mustApply(compactReq(3))
	if res.Revision != 3 || h.s.Revision() != 3 || h.s.CompactRevision() != 3 {
		t.Fatalf("compact changed revision: %d %d", res.Revision, h.s.CompactRevision())
	}
	wantCode(t, h.apply(compactReq(3)).Err, dkverr.Compacted)
	wantCode(t, h.apply(compactReq(2)).Err, dkverr.Compacted)
	// The compact revision survives a reopen.
	s2, err := Open(h.db, Limits{})
	if err != nil || s2.CompactRevision() != 3 || s2.Revision() != 3 {
		t.Fatalf("reopen: %v %d %d", err, s2.CompactRevision(), s2.Revision())
	}
}

func TestCounter(t *testing.T) {
	h := newHarness(t)
	ctr := func(delta int64, min, max *int64) Result {
		return h.apply(counterReq(&dkvpb.CounterRequest{Key: []byte("n"), Delta: delta, Min: min, Max: max}))
	}
	res := ctr(5, nil, nil)
	if res.Err != nil || res.Resp.(*dkvpb.CounterResponse).Value != 5 || res.Revision != 2 {
		t.Fatalf("first add: %v", res)
	}
	if kv := h.get("n"); string(kv.Value) != "5" || kv.Version != 1 {
		t.Fatalf("stored %v", kv)
	}
	res = ctr(-3, i64(0), i64(10))
	if res.Err != nil || res.Resp.(*dkvpb.CounterResponse).Value != 2 {
		t.Fatalf("add -3: %v", res)
	}
	res = ctr(-3, i64(0), nil)
	wantCode(t, res.Err, dkverr.Conflict)
	if !strings.Contains(res.Err.Error(), `counter "n" would become -1, outside [0,+inf]`) {
		t.Fatalf("message %q", res.Err)
	}
	wantCode(t, ctr(9, nil, i64(10)).Err, dkverr.Conflict)
	if h.s.Revision() != 3 || string(h.get("n").Value) != "2" {
		t.Fatal("refused counter changed state")
	}
	h.mustApply(putReq("n", "9223372036854775806"))
	wantCode(t, ctr(2, nil, nil).Err, dkverr.InvalidInput)
	h.mustApply(putReq("n", "-9223372036854775807"))
	wantCode(t, ctr(-2, nil, nil).Err, dkverr.InvalidInput)
	h.mustApply(putReq("n", "twelve"))
	res = ctr(1, nil, nil)
	wantCode(t, res.Err, dkverr.InvalidInput)
	if !strings.Contains(res.Err.Error(), `"n"`) {
		t.Fatalf("message does not name the key: %q", res.Err)
	}
	// Delta 0 on a missing key creates it at 0.
	res = h.mustApply(counterReq(&dkvpb.CounterRequest{Key: []byte("z"), Lease: 4}))
	if kv := h.get("z"); string(kv.Value) != "0" || kv.Lease != 4 || res.Events[0].Type != EventPut {
		t.Fatalf("zero counter %v", kv)
	}
}

func TestTxn(t *testing.T) {
	h := newHarness(t)
	h.mustApply(putReq("a", "1")) // 2
	h.mustApply(putReq("b", "x")) // 3
	cmp := func(key string, target dkvpb.Compare_CompareTarget, result dkvpb.Compare_CompareResult, u any) *dkvpb.Compare {
		c := &dkvpb.Compare{Key: []byte(key), Target: target, Result: result}
		switch v := u.(type) {
		case int64:
			switch target {
			case dkvpb.Compare_VERSION:
				c.TargetUnion = &dkvpb.Compare_Version{Version: v}
			case dkvpb.Compare_CREATE:
				c.TargetUnion = &dkvpb.Compare_CreateRevision{CreateRevision: v}
			case dkvpb.Compare_MOD:
				c.TargetUnion = &dkvpb.Compare_ModRevision{ModRevision: v}
			}
		case string:
			c.TargetUnion = &dkvpb.Compare_Value{Value: []byte(v)}
		case bool:
			c.TargetUnion = &dkvpb.Compare_Exists{Exists: v}
		}
		return c
	}
	E, NE, G, L := dkvpb.Compare_EQUAL, dkvpb.Compare_NOT_EQUAL, dkvpb.Compare_GREATER, dkvpb.Compare_LESS
	for _, tc := range []struct {
		c    *dkvpb.Compare
		want bool
	}{
		{cmp("a", dkvpb.Compare_VALUE, E, "1"), true},
		{cmp("a", dkvpb.Compare_VALUE, G, "0"), true},
		{cmp("a", dkvpb.Compare_VALUE, L, "0"), false},
		{cmp("a", dkvpb.Compare_VERSION, E, int64(1)), true},
		{cmp("a", dkvpb.Compare_CREATE, E, int64(2)), true},
		{cmp("b", dkvpb.Compare_MOD, G, int64(2)), true},
		{cmp("b", dkvpb.Compare_MOD, NE, int64(3)), false},
		{cmp("zz", dkvpb.Compare_VERSION, E, int64(0)), true},
		{cmp("zz", dkvpb.Compare_CREATE, E, nil), true},
		{cmp("zz", dkvpb.Compare_VALUE, E, ""), true},
		{cmp("zz", dkvpb.Compare_EXISTS, E, false), true},
		{cmp("a", dkvpb.Compare_EXISTS, E, true), true},
		{cmp("a", dkvpb.Compare_EXISTS, NE, true), false},
	} {
		res := h.mustApply(txnReq(&dkvpb.TxnRequest{Compare: []*dkvpb.Compare{tc.c}}))
		if got := res.Resp.(*dkvpb.TxnResponse).Succeeded; got != tc.want {
			t.Fatalf("compare %v: succeeded %v, want %v", tc.c, got, tc.want)
		}
		if res.Revision != 3 {
			t.Fatal("read-only txn advanced the revision")
		}
	}

	// Success branch: several writes share one revision; reads see earlier writes.
	res := h.mustApply(txnReq(&dkvpb.TxnRequest{
		Compare: []*dkvpb.Compare{cmp("a", dkvpb.Compare_VALUE, E, "1")},
		Success: []*dkvpb.RequestOp{opPut("c", "3"), opGet("c"), opDel("b"), opPut("a", "2")},
		Failure: []*dkvpb.RequestOp{opPut("never", "x")},
	}))
	tr := res.Resp.(*dkvpb.TxnResponse)
	if !tr.Succeeded || res.Revision != 4 || h.s.Revision() != 4 || len(res.Events) != 3 {
		t.Fatalf("txn: %v rev %d events %d", tr, res.Revision, len(res.Events))
	}
	got := tr.Responses[1].GetResponseRange()
	if len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "3" || got.Kvs[0].ModRevision != 4 || got.Header.Revision != 4 {
		t.Fatalf("read inside txn: %v", got)
	}
	for _, k := range []string{"a", "c"} {
		if kv := h.get(k); kv.ModRevision != 4 {
			t.Fatalf("%s mod %d, want 4", k, kv.ModRevision)
		}
	}
	if h.get("b") != nil || h.get("never") != nil {
		t.Fatal("wrong branch effects")
	}

	// Failure branch runs when a compare fails.
	res = h.mustApply(txnReq(&dkvpb.TxnRequest{
		Compare: []*dkvpb.Compare{cmp("a", dkvpb.Compare_VALUE, E, "1")},
		Success: []*dkvpb.RequestOp{opPut("never", "x")},
		Failure: []*dkvpb.RequestOp{opGet("a")},
	}))
	if tr := res.Resp.(*dkvpb.TxnResponse); tr.Succeeded || string(tr.Responses[0].GetResponseRange().Kvs[0].Value) != "2" || res.Revision != 4 {
		t.Fatalf("failure branch: %v", tr)
	}
}

func TestTxnAtomicity(t *testing.T) {
	h := newHarness(t)
	h.mustApply(putReq("a", "1"))
	snapshot := func() string {
		resp, _ := h.rng(&dkvpb.RangeRequest{Prefix: true})
		return fmtKVs(resp.Kvs)
	}
	before := snapshot()
	condPut := &dkvpb.RequestOp{Request: &dkvpb.RequestOp_RequestPut{RequestPut: &dkvpb.PutRequest{Key: []byte("a"), Value: []byte("x"), IfAbsent: true}}}
	condDel := &dkvpb.RequestOp{Request: &dkvpb.RequestOp_RequestDeleteRange{RequestDeleteRange: &dkvpb.DeleteRangeRequest{Key: []byte("a"), IfVersion: 9}}}
	pastRead := &dkvpb.RequestOp{Request: &dkvpb.RequestOp_RequestRange{RequestRange: &dkvpb.RangeRequest{Key: []byte("a"), Revision: 5}}}
	for _, tc := range []struct {
		name string
		ops  []*dkvpb.RequestOp
		code dkverr.Code
	}{
		{"failing if_absent after a put", []*dkvpb.RequestOp{opPut("b", "1"), condPut}, dkverr.Conflict},
		{"failing if_version delete", []*dkvpb.RequestOp{opPut("b", "1"), opDel("c"), condDel}, dkverr.Conflict},
		{"read in the future", []*dkvpb.RequestOp{opPut("b", "1"), pastRead}, dkverr.InvalidInput},
		{"same key put twice", []*dkvpb.RequestOp{opPut("b", "1"), opPut("b", "2")}, dkverr.InvalidInput},
		{"put and delete same key", []*dkvpb.RequestOp{opPut("b", "1"), opDel("b")}, dkverr.InvalidInput},
		{"put inside deleted prefix", []*dkvpb.RequestOp{
			{Request: &dkvpb.RequestOp_RequestDeleteRange{RequestDeleteRange: &dkvpb.DeleteRangeRequest{Key: []byte("b"), Prefix: true}}},
			opPut("b/1", "1"),
		}, dkverr.InvalidInput},
	} {
		res := h.apply(txnReq(&dkvpb.TxnRequest{Success: tc.ops}))
		if codeOf(res.Err) != tc.code {
			t.Fatalf("%s: got %v, want %v", tc.name, res.Err, tc.code)
		}
		if res.Revision != 2 || h.s.Revision() != 2 || res.Events != nil || snapshot() != before {
			t.Fatalf("%s: refused txn left a trace", tc.name)
		}
	}
	// A failing txn in the middle of a shared batch leaves the batch's
	// other commands intact.
	b := h.db.NewIndexedBatch()
	r1 := h.s.Apply(b, putReq("x", "1"))
	r2 := h.s.Apply(b, txnReq(&dkvpb.TxnRequest{Success: []*dkvpb.RequestOp{opPut("y", "1"), condPut}}))
	r3 := h.s.Apply(b, putReq("x", "2", func(p *dkvpb.PutRequest) { p.IfVersion = 1 }))
	if r1.Err != nil || r2.Err == nil || r3.Err != nil || r3.Revision != 4 {
		t.Fatalf("batch: %v / %v / %v", r1, r2.Err, r3)
	}
	if err := b.Commit(nil); err != nil {
		t.Fatal(err)
	}
	if h.get("y") != nil || h.get("x").Version != 2 {
		t.Fatal("batch state wrong")
	}
}

func TestReadThroughBatchAndReload(t *testing.T) {
	h := newHarness(t)
	h.mustApply(putReq("a", "1"))
	b := h.db.NewIndexedBatch()
	h.s.Apply(b, putReq("a", "2"))
	// The batch sees its own writes and revision; the DB does not yet.
	resp, err := h.s.Range(b, &dkvpb.RangeRequest{Key: []byte("a")})
	if err != nil || string(resp.Kvs[0].Value) != "2" || resp.Header.Revision != 3 {
		t.Fatalf("through batch: %v %v", resp, err)
	}
	if resp, _ := h.rng(&dkvpb.RangeRequest{Key: []byte("a")}); string(resp.Kvs[0].Value) != "1" || resp.Header.Revision != 2 {
		t.Fatalf("through db: %v", resp)
	}
	b.Close() // dropped, e.g. a crash before commit
	if err := h.s.Reload(h.db); err != nil || h.s.Revision() != 2 {
		t.Fatalf("reload: %v %d", err, h.s.Revision())
	}
	if res := h.mustApply(putReq("a", "3")); res.Revision != 3 || h.get("a").Version != 2 {
		t.Fatalf("after reload: %v", res)
	}
}

func TestHashKV(t *testing.T) {
	h := newHarness(t)
	h.mustApply(putReq("a", "1"))
	h.mustApply(putReq("b", "2"))
	h1, rev, _, err := h.s.HashKV(h.db, 0)
	if err != nil || rev != 3 {
		t.Fatal(err, rev)
	}
	h.mustApply(putReq("a", "1"))
	h2, _, _, _ := h.s.HashKV(h.db, 0)
	if h1 == h2 {
		t.Fatal("hash ignores mod revision")
	}
	hAt2, rev, _, _ := h.s.HashKV(h.db, 3)
	if hAt2 != h1 || rev != 3 {
		t.Fatal("hash at past revision differs from hash taken then")
	}
	if _, _, _, err := h.s.HashKV(h.db, 9); codeOf(err) != dkverr.InvalidInput {
		t.Fatal(err)
	}
}

func TestApplyIgnoresTime(t *testing.T) {
	h1, h2 := newHarness(t), newHarness(t)
	r1 := putReq("a", "1")
	r1.TimeUnixNano = 1
	r2 := putReq("a", "1")
	r2.TimeUnixNano = 999999
	h1.mustApply(r1)
	h2.mustApply(r2)
	if d := diffKeyspace(t, h1.db, h2.db); d != "" {
		t.Fatal(d)
	}
}
