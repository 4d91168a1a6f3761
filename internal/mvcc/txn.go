package mvcc

import (
	"bytes"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
)

// Txn applies a transaction, in two phases. Phase one evaluates the compares
// and then every condition of the chosen branch (if_absent, if_version,
// ignore_value, read revisions) against the state before the txn; it may
// refuse, and then nothing has been written. Phase two runs the ops in
// order and cannot fail. Checking conditions up front is sound because
// ValidateTxn forbids a branch to write the same key twice, so no op's
// condition can depend on an earlier op of the same branch.
func (w *Writer) Txn(t *dkvpb.TxnRequest) (*dkvpb.TxnResponse, error) {
	// Every compare on the chosen path, nested txns' included, is
	// evaluated against the state before the txn (etcd's semantics), and
	// recorded in path in depth-first order for phase two.
	var path []bool
	if err := w.checkTxn(t, &path); err != nil {
		return nil, err
	}
	return w.runTxn(t, &path), nil
}

// checkTxn is phase one for t and the txns nested in its chosen branch.
func (w *Writer) checkTxn(t *dkvpb.TxnRequest, path *[]bool) error {
	ok := true
	for _, c := range t.Compare {
		if !w.compare(c) {
			ok = false
			break
		}
	}
	*path = append(*path, ok)
	ops := t.Success
	if !ok {
		ops = t.Failure
	}
	for _, op := range ops {
		var err error
		switch r := op.Request.(type) {
		case *dkvpb.RequestOp_RequestRange:
			err = checkReadRevision(r.RequestRange.Revision, w.cur, w.comp)
			if err == nil {
				err = w.checkFence(r.RequestRange.Lock)
			}
		case *dkvpb.RequestOp_RequestPut:
			err = w.checkPut(r.RequestPut)
		case *dkvpb.RequestOp_RequestDeleteRange:
			err = w.checkDelete(r.RequestDeleteRange)
		case *dkvpb.RequestOp_RequestTxn:
			err = w.checkTxn(r.RequestTxn, path)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// runTxn is phase two: it runs the branches path chose, consuming it.
func (w *Writer) runTxn(t *dkvpb.TxnRequest, path *[]bool) *dkvpb.TxnResponse {
	ok := (*path)[0]
	*path = (*path)[1:]
	ops := t.Success
	if !ok {
		ops = t.Failure
	}
	resp := &dkvpb.TxnResponse{Succeeded: ok, Responses: make([]*dkvpb.ResponseOp, 0, len(ops))}
	for _, op := range ops {
		switch r := op.Request.(type) {
		case *dkvpb.RequestOp_RequestRange:
			rr, err := w.s.rangeAt(w.b, r.RequestRange, w.cur, w.comp, false)
			must(err) // the revision was checked above, so only I/O can fail
			if r.RequestRange.Revision == 0 {
				rr.Header = nil // set to the txn's revision by StampRevision
			}
			resp.Responses = append(resp.Responses, &dkvpb.ResponseOp{Response: &dkvpb.ResponseOp_ResponseRange{ResponseRange: rr}})
		case *dkvpb.RequestOp_RequestPut:
			resp.Responses = append(resp.Responses, &dkvpb.ResponseOp{Response: &dkvpb.ResponseOp_ResponsePut{ResponsePut: w.put(r.RequestPut, &dkvpb.PutResponse{})}})
		case *dkvpb.RequestOp_RequestDeleteRange:
			resp.Responses = append(resp.Responses, &dkvpb.ResponseOp{Response: &dkvpb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: w.deleteRange(r.RequestDeleteRange)}})
		case *dkvpb.RequestOp_RequestTxn:
			resp.Responses = append(resp.Responses, &dkvpb.ResponseOp{Response: &dkvpb.ResponseOp_ResponseTxn{ResponseTxn: w.runTxn(r.RequestTxn, path)}})
		}
	}
	return resp
}

// compare evaluates c against the current state. A missing key has
// version, create and mod revision 0 and an empty value.
func (w *Writer) compare(c *dkvpb.Compare) bool {
	if len(c.RangeEnd) > 0 {
		return w.compareRange(c)
	}
	rec, exists := w.get(c.Key)
	return compareRecord(c, rec, exists, w)
}

// compareRange evaluates a compare over [key, range_end) as etcd does: it
// holds if it holds for every key in the range; over no key, a VALUE
// compare fails and the others compare against a missing key's zeros.
func (w *Writer) compareRange(c *dkvpb.Compare) bool {
	rr, err := w.s.rangeAt(w.b, &dkvpb.RangeRequest{Key: c.Key, RangeEnd: c.RangeEnd}, w.cur, w.comp, false)
	must(err) // at the current revision, only I/O can fail
	if len(rr.Kvs) == 0 {
		if c.Target == dkvpb.Compare_VALUE {
			return false
		}
		return compareRecord(c, record{}, false, w)
	}
	for _, kv := range rr.Kvs {
		rec := record{create: kv.CreateRevision, mod: kv.ModRevision, version: kv.Version, lease: kv.Lease, value: kv.Value, labels: encodeLabels(kv.Labels)}
		if !compareRecord(c, rec, true, w) {
			return false
		}
	}
	return true
}

func compareRecord(c *dkvpb.Compare, rec record, exists bool, w *Writer) bool {
	if c.Target == dkvpb.Compare_LABEL {
		return compareLabel(c, rec, exists)
	}
	var cmp int
	switch c.Target {
	case dkvpb.Compare_VERSION:
		cmp = cmpInt(rec.version, c.GetVersion())
	case dkvpb.Compare_CREATE:
		cmp = cmpInt(rec.create, c.GetCreateRevision())
	case dkvpb.Compare_MOD:
		cmp = cmpInt(rec.mod, c.GetModRevision())
	case dkvpb.Compare_VALUE:
		cmp = bytes.Compare(rec.value, c.GetValue())
	case dkvpb.Compare_EXISTS:
		if exists != c.GetExists() {
			cmp = 1
		}
	case dkvpb.Compare_LOCK:
		cmp = w.compareLock(c)
	case dkvpb.Compare_LEASE:
		cmp = cmpInt(rec.lease, c.GetLease())
	}
	switch c.Result {
	case dkvpb.Compare_EQUAL:
		return cmp == 0
	case dkvpb.Compare_NOT_EQUAL:
		return cmp != 0
	case dkvpb.Compare_GREATER:
		return cmp > 0
	case dkvpb.Compare_LESS:
		return cmp < 0
	}
	return false
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
