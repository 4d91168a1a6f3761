package state

import (
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/auth"
	"github.com/dkv-io/dkv/internal/mvcc"
	"google.golang.org/protobuf/proto"
)

// The keyspace's commands: put, delete, txn, counter, compaction and the
// label indexes, applied by the MVCC engine (package mvcc).

var putCommand = Command{
	name: "put",
	validate: func(req *dkvpb.InternalRequest, l mvcc.Limits) error {
		return mvcc.ValidatePut(req.GetPut(), l)
	},
	checked: true,
	needs: func(msg proto.Message, _ LocalState) ([]Need, error) {
		return putNeeds(msg.(*dkvpb.PutRequest), nil), nil
	},
	growsData: always,
	write: func(_ *Machine, w *mvcc.Writer, req *dkvpb.InternalRequest) (proto.Message, error) {
		return w.Put(req.GetPut())
	},
}

var deleteRangeCommand = Command{
	name: "delete_range",
	validate: func(req *dkvpb.InternalRequest, l mvcc.Limits) error {
		return mvcc.ValidateDeleteRange(req.GetDeleteRange(), l)
	},
	checked: true,
	needs: func(msg proto.Message, _ LocalState) ([]Need, error) {
		return deleteNeeds(msg.(*dkvpb.DeleteRangeRequest), nil), nil
	},
	write: func(_ *Machine, w *mvcc.Writer, req *dkvpb.InternalRequest) (proto.Message, error) {
		return w.DeleteRange(req.GetDeleteRange())
	},
}

var txnCommand = Command{
	name: "txn",
	validate: func(req *dkvpb.InternalRequest, l mvcc.Limits) error {
		return mvcc.ValidateTxn(req.GetTxn(), l)
	},
	checked: true,
	needs: func(msg proto.Message, _ LocalState) ([]Need, error) {
		n, ok := txnNeeds(msg.(*dkvpb.TxnRequest), nil)
		if !ok {
			return RootOnly, nil // an op this table does not know
		}
		return n, nil
	},
	// A txn with a put anywhere in its top-level branches.
	growsData: func(req *dkvpb.InternalRequest) bool {
		t := req.GetTxn()
		for _, ops := range [][]*dkvpb.RequestOp{t.GetSuccess(), t.GetFailure()} {
			for _, op := range ops {
				if op.GetRequestPut() != nil {
					return true
				}
			}
		}
		return false
	},
	write: func(_ *Machine, w *mvcc.Writer, req *dkvpb.InternalRequest) (proto.Message, error) {
		return w.Txn(req.GetTxn())
	},
}

var counterCommand = Command{
	name: "counter",
	validate: func(req *dkvpb.InternalRequest, l mvcc.Limits) error {
		return mvcc.ValidateCounter(req.GetCounter(), l)
	},
	checked: true,
	needs: func(msg proto.Message, _ LocalState) ([]Need, error) {
		// The reply carries the new value, and so reveals the old one.
		r := msg.(*dkvpb.CounterRequest)
		k := auth.Key(r.GetKey())
		return handleNeeds(r.GetLock(), k, "counter", []Need{{auth.Read | auth.Write, k, "counter"}}), nil
	},
	growsData: always,
	write: func(_ *Machine, w *mvcc.Writer, req *dkvpb.InternalRequest) (proto.Message, error) {
		return w.Counter(req.GetCounter())
	},
}

var compactCommand = Command{
	name: "compact",
	validate: func(req *dkvpb.InternalRequest, _ mvcc.Limits) error {
		return mvcc.ValidateCompact(req.GetCompact())
	},
	checked: true,
	// needs: the root role.
	write: func(_ *Machine, w *mvcc.Writer, req *dkvpb.InternalRequest) (proto.Message, error) {
		return w.Compact(req.GetCompact())
	},
	purges: true,
}

var indexCreateCommand = Command{
	name: "index_create",
	validate: func(req *dkvpb.InternalRequest, l mvcc.Limits) error {
		r := req.GetIndexCreate()
		return mvcc.ValidateIndex(r.GetPrefix(), r.GetLabel(), l)
	},
	growsData: always,
	write: func(_ *Machine, w *mvcc.Writer, req *dkvpb.InternalRequest) (proto.Message, error) {
		return w.IndexCreate(req.GetIndexCreate())
	},
}

var indexDropCommand = Command{
	name: "index_drop",
	validate: func(req *dkvpb.InternalRequest, l mvcc.Limits) error {
		r := req.GetIndexDrop()
		return mvcc.ValidateIndex(r.GetPrefix(), r.GetLabel(), l)
	},
	write: func(_ *Machine, w *mvcc.Writer, req *dkvpb.InternalRequest) (proto.Message, error) {
		return w.IndexDrop(req.GetIndexDrop())
	},
}

// RangeNeeds is what a range read needs (a read, not a command: the
// server asks for it directly, and txns for their range ops).
func RangeNeeds(r *dkvpb.RangeRequest) []Need { return rangeNeeds(r, nil) }

// txnNeeds appends what t and the txns nested in it need; false for an
// op it does not know.
func txnNeeds(t *dkvpb.TxnRequest, n []Need) ([]Need, bool) {
	for _, c := range t.GetCompare() {
		sp := auth.SpanOf(c.GetKey(), c.GetRangeEnd(), false)
		n = append(n, Need{auth.Read, sp, "txn compare"})
		n = handleNeeds(c.GetLock(), sp, "txn compare", n)
	}
	for _, ops := range [][]*dkvpb.RequestOp{t.GetSuccess(), t.GetFailure()} {
		for _, op := range ops {
			switch o := op.GetRequest().(type) {
			case *dkvpb.RequestOp_RequestRange:
				n = rangeNeeds(o.RequestRange, n)
			case *dkvpb.RequestOp_RequestPut:
				n = putNeeds(o.RequestPut, n)
			case *dkvpb.RequestOp_RequestDeleteRange:
				n = deleteNeeds(o.RequestDeleteRange, n)
			case *dkvpb.RequestOp_RequestTxn:
				var ok bool
				if n, ok = txnNeeds(o.RequestTxn, n); !ok {
					return nil, false
				}
			default:
				return nil, false
			}
		}
	}
	return n, true
}

func rangeNeeds(r *dkvpb.RangeRequest, n []Need) []Need {
	sp := auth.SpanOf(r.GetKey(), r.GetRangeEnd(), r.GetPrefix())
	n = append(n, Need{auth.Read, sp, "range"})
	return handleNeeds(r.GetLock(), sp, "range", n)
}

// handleNeeds is what carrying lock handle h on a request over span sp
// needs. A handle for a key within sp needs nothing more: the request's
// own permission covers it. A handle for another key fences the request
// on that lock (docs/locks.md, guarantee 4), and its outcome tells
// whether that lock is held by exactly that handle; so it needs read on
// the lock's key, with which the caller could read the lock anyway
// (Describe). Checked before the request goes anywhere near the lock
// table, so a refusal is the same whatever the lock's state: a handle is
// no oracle for another tenant's locks.
func handleNeeds(h *dkvpb.LockHandle, sp auth.Span, what string, n []Need) []Need {
	if h == nil {
		return n
	}
	hk := auth.Key(h.GetKey())
	if auth.Covers([]auth.Span{sp}, hk) {
		return n
	}
	return append(n, Need{auth.Read, hk, what + " lock handle for another key"})
}

func putNeeds(r *dkvpb.PutRequest, n []Need) []Need {
	n = append(n, Need{auth.Write, auth.Key(r.GetKey()), "put"})
	n = handleNeeds(r.GetLock(), auth.Key(r.GetKey()), "put", n)
	switch {
	case r.GetPrevKv():
		n = append(n, Need{auth.Read, auth.Key(r.GetKey()), "put prev_kv"})
	case r.GetIfAbsent() || r.GetIfVersion() != 0 || r.GetIfModRevision() != 0:
		// The outcome of a condition tells whether and how the key exists.
		n = append(n, Need{auth.Read, auth.Key(r.GetKey()), "conditional put"})
	}
	return n
}

func deleteNeeds(r *dkvpb.DeleteRangeRequest, n []Need) []Need {
	sp := auth.SpanOf(r.GetKey(), r.GetRangeEnd(), r.GetPrefix())
	n = append(n, Need{auth.Write, sp, "delete"})
	n = handleNeeds(r.GetLock(), sp, "delete", n)
	if r.GetPrevKv() || r.GetIfVersion() != 0 {
		n = append(n, Need{auth.Read, sp, "delete prev_kv"})
	}
	return n
}
