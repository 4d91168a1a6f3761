package mvcc

import (
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"google.golang.org/protobuf/proto"
)

func TestValidate(t *testing.T) {
	big := func(n int) string { return strings.Repeat("x", n) }
	rng := func(r *dkvpb.RangeRequest) *dkvpb.InternalRequest {
		return txnReq(&dkvpb.TxnRequest{Success: []*dkvpb.RequestOp{{Request: &dkvpb.RequestOp_RequestRange{RequestRange: r}}}})
	}
	manyOps := make([]*dkvpb.RequestOp, 1000)
	for i := range manyOps {
		manyOps[i] = opGet("k")
	}
	for _, tc := range []struct {
		name string
		req  *dkvpb.InternalRequest
		msg  string // "" = valid
	}{
		{"nil", nil, "request is empty"},
		{"no command", &dkvpb.InternalRequest{}, "request has no command"},
		{"put ok", putReq("k", "v"), ""},
		{"empty key", putReq("", "v"), "key is empty"},
		{"long key", putReq(big(5120), "v"), "key is 5120 bytes; the limit is 4096"},
		{"big value", putReq("k", big(2<<20)), "value is 2097152 bytes; the limit is 1048576 (--max-value-bytes)"},
		{"negative lease", putReq("k", "v", func(p *dkvpb.PutRequest) { p.Lease = -1 }), "lease is -1"},
		{"negative if_version", putReq("k", "v", func(p *dkvpb.PutRequest) { p.IfVersion = -1 }), "if_version is -1"},
		{"if_absent and if_version", putReq("k", "v", func(p *dkvpb.PutRequest) { p.IfAbsent = true; p.IfVersion = 1 }), "if_absent cannot be combined"},
		{"delete prefix with range_end", delReq(&dkvpb.DeleteRangeRequest{Key: []byte("a"), RangeEnd: []byte("b"), Prefix: true}), "range_end must be empty when prefix is set"},
		{"delete backwards", delReq(&dkvpb.DeleteRangeRequest{Key: []byte("b"), RangeEnd: []byte("a")}), `range_end "a" sorts before key "b"`},
		{"delete empty key", delReq(&dkvpb.DeleteRangeRequest{}), "key is empty"},
		{"delete all", delReq(&dkvpb.DeleteRangeRequest{Prefix: true}), ""},
		{"delete from empty key", delReq(&dkvpb.DeleteRangeRequest{RangeEnd: []byte{0}}), ""},
		{"delete range if_version", delReq(&dkvpb.DeleteRangeRequest{Key: []byte("a"), RangeEnd: []byte("b"), IfVersion: 1}), "if_version applies to a single key"},
		{"long range_end", delReq(&dkvpb.DeleteRangeRequest{Key: []byte("a"), RangeEnd: []byte(big(4097))}), "range_end is 4097 bytes; the limit is 4096"},
		{"negative limit", rng(&dkvpb.RangeRequest{Key: []byte("a"), Limit: -1}), "success op 0: limit is -1"},
		{"negative revision", rng(&dkvpb.RangeRequest{Key: []byte("a"), Revision: -2}), "revision is -2"},
		{"bad sort order", rng(&dkvpb.RangeRequest{Key: []byte("a"), SortOrder: 9}), "unknown sort_order 9"},
		{"bad sort target", rng(&dkvpb.RangeRequest{Key: []byte("a"), SortTarget: 9}), "unknown sort_target 9"},
		{"txn too big", txnReq(&dkvpb.TxnRequest{Success: manyOps}), "txn has 1000 ops; the limit is 128"},
		{"txn nil op", txnReq(&dkvpb.TxnRequest{Failure: []*dkvpb.RequestOp{{}}}), "failure op 0: op has no request"},
		{"txn dup put", txnReq(&dkvpb.TxnRequest{Success: []*dkvpb.RequestOp{opPut("a", "1"), opPut("a", "2")}}), `puts key "a" twice`},
		{"txn dup across branches ok", txnReq(&dkvpb.TxnRequest{Success: []*dkvpb.RequestOp{opPut("a", "1")}, Failure: []*dkvpb.RequestOp{opPut("a", "2")}}), ""},
		{"nested txn dup with parent", txnReq(&dkvpb.TxnRequest{Success: []*dkvpb.RequestOp{opPut("a", "1"), nestedTxn(&dkvpb.TxnRequest{Failure: []*dkvpb.RequestOp{opPut("a", "2")}})}}), `puts key "a" twice`},
		{"nested txn put under parent delete", txnReq(&dkvpb.TxnRequest{Success: []*dkvpb.RequestOp{{Request: &dkvpb.RequestOp_RequestDeleteRange{RequestDeleteRange: &dkvpb.DeleteRangeRequest{Key: []byte("a"), Prefix: true}}}, nestedTxn(&dkvpb.TxnRequest{Success: []*dkvpb.RequestOp{opPut("ab", "2")}})}}), `both puts and deletes key "ab"`},
		{"nested txn branches exclusive", txnReq(&dkvpb.TxnRequest{Success: []*dkvpb.RequestOp{nestedTxn(&dkvpb.TxnRequest{Success: []*dkvpb.RequestOp{opPut("a", "1")}, Failure: []*dkvpb.RequestOp{opPut("a", "2")}})}}), ""},
		{"two nested txns put one key", txnReq(&dkvpb.TxnRequest{Success: []*dkvpb.RequestOp{nestedTxn(&dkvpb.TxnRequest{Success: []*dkvpb.RequestOp{opPut("a", "1")}}), nestedTxn(&dkvpb.TxnRequest{Failure: []*dkvpb.RequestOp{opPut("a", "2")}})}}), `puts key "a" twice`},
		{"nested txn bad compare", txnReq(&dkvpb.TxnRequest{Success: []*dkvpb.RequestOp{nestedTxn(&dkvpb.TxnRequest{Compare: []*dkvpb.Compare{{}}})}}), "nested txn compare 0: key is empty"},
		{"nested too deep", txnReq(deepTxn(17)), "nested more than 16 deep"},
		{"nested 16 deep ok", txnReq(deepTxn(16)), ""},
		{"compare lease", txnReq(&dkvpb.TxnRequest{Compare: []*dkvpb.Compare{{Key: []byte("a"), Target: dkvpb.Compare_LEASE, TargetUnion: &dkvpb.Compare_Lease{Lease: 7}}}}), ""},
		{"compare range on exists", txnReq(&dkvpb.TxnRequest{Compare: []*dkvpb.Compare{{Key: []byte("a"), RangeEnd: []byte("b"), Target: dkvpb.Compare_EXISTS}}}), "compare on EXISTS takes no range_end"},
		{"ignore_lease with lease", putReq("k", "v", func(p *dkvpb.PutRequest) { p.IgnoreLease = true; p.Lease = 3 }), "lease and ttl_ms must be unset when ignore_lease is set"},
		{"compare bad target", txnReq(&dkvpb.TxnRequest{Compare: []*dkvpb.Compare{{Key: []byte("a"), Target: 7}}}), "compare 0: unknown compare target 7"},
		{"compare bad result", txnReq(&dkvpb.TxnRequest{Compare: []*dkvpb.Compare{{Key: []byte("a"), Result: 7}}}), "unknown compare result 7"},
		{"compare exists greater", txnReq(&dkvpb.TxnRequest{Compare: []*dkvpb.Compare{{Key: []byte("a"), Target: dkvpb.Compare_EXISTS, Result: dkvpb.Compare_GREATER}}}), "EQUAL or NOT_EQUAL"},
		{"compare wrong operand", txnReq(&dkvpb.TxnRequest{Compare: []*dkvpb.Compare{{Key: []byte("a"), Target: dkvpb.Compare_VERSION, TargetUnion: &dkvpb.Compare_Value{}}}}), "wrong type"},
		{"compare empty key", txnReq(&dkvpb.TxnRequest{Compare: []*dkvpb.Compare{{}}}), "compare 0: key is empty"},
		{"counter min > max", counterReq(&dkvpb.CounterRequest{Key: []byte("c"), Min: i64(5), Max: i64(1)}), "min 5 is greater than max 1"},
		{"counter ok", counterReq(&dkvpb.CounterRequest{Key: []byte("c"), Delta: -1}), ""},
		{"compact zero", compactReq(0), "compact revision is 0"},
		{"compact nil", &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Compact{}}, "compact request is empty"},
	} {
		err := Validate(tc.req, Limits{})
		if tc.msg == "" {
			if err != nil {
				t.Errorf("%s: unexpected %v", tc.name, err)
			}
			continue
		}
		if codeOf(err) != dkverr.InvalidInput || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: got %v, want InvalidInput containing %q", tc.name, err, tc.msg)
		}
	}
}

func TestRangeValidatesWithLimits(t *testing.T) {
	h := newHarness(t)
	_, err := h.rng(&dkvpb.RangeRequest{Key: []byte(strings.Repeat("k", 5000))})
	wantCode(t, err, dkverr.InvalidInput)
	_, err = h.rng(&dkvpb.RangeRequest{})
	wantCode(t, err, dkverr.InvalidInput)
}

// FuzzValidate decodes arbitrary bytes as a command; whatever Validate
// accepts must apply on a fresh store without panicking.
func FuzzValidate(f *testing.F) {
	seeds := []*dkvpb.InternalRequest{
		putReq("a", "1", func(p *dkvpb.PutRequest) { p.PrevKv = true; p.IfAbsent = true }),
		delReq(&dkvpb.DeleteRangeRequest{Key: []byte("a"), Prefix: true}),
		delReq(&dkvpb.DeleteRangeRequest{Key: []byte("a\x00"), RangeEnd: []byte{0}}),
		counterReq(&dkvpb.CounterRequest{Key: []byte("c"), Delta: 3, Min: i64(0)}),
		compactReq(1),
		txnReq(&dkvpb.TxnRequest{
			Compare: []*dkvpb.Compare{{Key: []byte("a"), Target: dkvpb.Compare_VALUE, TargetUnion: &dkvpb.Compare_Value{Value: []byte("1")}}},
			Success: []*dkvpb.RequestOp{opPut("b", "2"), opGet("b"), opDel("a")},
			Failure: []*dkvpb.RequestOp{{Request: &dkvpb.RequestOp_RequestRange{RequestRange: &dkvpb.RangeRequest{Prefix: true, SortOrder: 2, SortTarget: 4, Limit: 1}}}},
		}),
	}
	for _, s := range seeds {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0x52, 0x02, 0x0a, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		req := &dkvpb.InternalRequest{}
		if err := proto.Unmarshal(data, req); err != nil {
			return
		}
		if err := Validate(req, Limits{}); err != nil {
			if codeOf(err) != dkverr.InvalidInput {
				t.Fatalf("Validate returned %v", err)
			}
			return
		}
		db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem(), Logger: quietLogger{}})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		s, err := Open(db, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		// Seed some state so conditions and deletes have something to see.
		b := db.NewIndexedBatch()
		defer b.Close()
		for _, k := range []string{"a", "a\x00", "b", "c"} {
			if res := s.Apply(b, putReq(k, "1")); res.Err != nil {
				t.Fatal(res.Err)
			}
		}
		res := s.Apply(b, req)
		if res.Err == nil && res.Resp == nil {
			t.Fatal("success without a response")
		}
		if res.Err != nil && res.Revision != 5 { // 1 (empty) + the four puts
			t.Fatal("refused command changed the revision")
		}
		if _, _, _, err := s.HashKV(b, 0); err != nil {
			t.Fatal(err)
		}
	})
}

func nestedTxn(t *dkvpb.TxnRequest) *dkvpb.RequestOp {
	return &dkvpb.RequestOp{Request: &dkvpb.RequestOp_RequestTxn{RequestTxn: t}}
}

// deepTxn is a txn with n txns nested in one another.
func deepTxn(n int) *dkvpb.TxnRequest {
	t := &dkvpb.TxnRequest{Success: []*dkvpb.RequestOp{opPut("leaf", "v")}}
	for i := 0; i < n; i++ {
		t = &dkvpb.TxnRequest{Success: []*dkvpb.RequestOp{nestedTxn(t)}}
	}
	return t
}
