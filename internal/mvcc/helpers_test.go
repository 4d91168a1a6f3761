package mvcc

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
)

func openDB(tb testing.TB) *pebble.DB {
	tb.Helper()
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem(), Logger: quietLogger{}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

type harness struct {
	t  testing.TB
	db *pebble.DB
	s  *Store
}

// newHarness is a store in the layout a cluster of this build runs
// (LayoutValueOnce).
func newHarness(t testing.TB) *harness {
	h := newHarnessLayout2(t)
	h.upgrade()
	return h
}

// upgrade moves the store to LayoutValueOnce, as the replicated command
// does.
func (h *harness) upgrade() {
	h.t.Helper()
	b := h.db.NewIndexedBatch()
	defer b.Close()
	if _, err := h.s.UpgradeLayout(b); err != nil {
		h.t.Fatal(err)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		h.t.Fatal(err)
	}
}

// newHarnessLayout2 is a store in LayoutLatestAndHistory, where every
// store starts.
func newHarnessLayout2(t testing.TB) *harness {
	db := openDB(t)
	s, err := Open(db, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, db: db, s: s}
	// Writes must name existing leases; tests use ids 1-9 freely. Grants
	// change no key and no revision.
	for id := int64(1); id <= 9; id++ {
		h.mustApply(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseGrant{
			LeaseGrant: &dkvpb.LeaseGrantRequest{Id: id, TtlMs: 60_000}}})
	}
	return h
}

// apply applies req in its own batch and commits it.
func (h *harness) apply(req *dkvpb.InternalRequest) Result {
	h.t.Helper()
	b := h.db.NewIndexedBatch()
	res := h.s.Apply(b, req)
	h.s.BeginCommit()
	if err := b.Commit(pebble.NoSync); err != nil {
		h.t.Fatal(err)
	}
	h.s.EndCommit()
	b.Close()
	return res
}

// mustApply applies req and fails the test if it is refused.
func (h *harness) mustApply(req *dkvpb.InternalRequest) Result {
	h.t.Helper()
	res := h.apply(req)
	if res.Err != nil {
		h.t.Fatalf("apply %v: %v", req, res.Err)
	}
	return res
}

func (h *harness) rng(req *dkvpb.RangeRequest) (*dkvpb.RangeResponse, error) {
	return h.s.Range(h.db, req)
}

func (h *harness) get(key string) *dkvpb.KeyValue {
	h.t.Helper()
	resp, err := h.rng(&dkvpb.RangeRequest{Key: []byte(key)})
	if err != nil {
		h.t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	return resp.Kvs[0]
}

func putReq(key, value string, opts ...func(*dkvpb.PutRequest)) *dkvpb.InternalRequest {
	p := &dkvpb.PutRequest{Key: []byte(key), Value: []byte(value)}
	for _, o := range opts {
		o(p)
	}
	return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Put{Put: p}}
}

func delReq(d *dkvpb.DeleteRangeRequest) *dkvpb.InternalRequest {
	return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_DeleteRange{DeleteRange: d}}
}

func txnReq(t *dkvpb.TxnRequest) *dkvpb.InternalRequest {
	return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Txn{Txn: t}}
}

func counterReq(c *dkvpb.CounterRequest) *dkvpb.InternalRequest {
	return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Counter{Counter: c}}
}

func compactReq(rev int64) *dkvpb.InternalRequest {
	return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Compact{Compact: &dkvpb.CompactRequest{Revision: rev}}}
}

func opPut(key, value string) *dkvpb.RequestOp {
	return &dkvpb.RequestOp{Request: &dkvpb.RequestOp_RequestPut{RequestPut: &dkvpb.PutRequest{Key: []byte(key), Value: []byte(value)}}}
}

func opDel(key string) *dkvpb.RequestOp {
	return &dkvpb.RequestOp{Request: &dkvpb.RequestOp_RequestDeleteRange{RequestDeleteRange: &dkvpb.DeleteRangeRequest{Key: []byte(key)}}}
}

func opGet(key string) *dkvpb.RequestOp {
	return &dkvpb.RequestOp{Request: &dkvpb.RequestOp_RequestRange{RequestRange: &dkvpb.RangeRequest{Key: []byte(key)}}}
}

func codeOf(err error) dkverr.Code {
	var e *dkverr.Error
	if err == nil {
		return dkverr.OK
	}
	if errors.As(err, &e) {
		return e.Code
	}
	return dkverr.Internal
}

func wantCode(t testing.TB, err error, want dkverr.Code) {
	t.Helper()
	if got := codeOf(err); got != want {
		t.Fatalf("got %v (%v), want code %v", got, err, want)
	}
}

func keyNames(kvs []*dkvpb.KeyValue) []string {
	var out []string
	for _, kv := range kvs {
		out = append(out, string(kv.Key))
	}
	return out
}

func i64(v int64) *int64 { return &v }

// quietLogger keeps Pebble's informational chatter out of test output.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
