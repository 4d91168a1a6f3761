package storekeys

import (
	"bytes"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"google.golang.org/protobuf/proto"
)

// Request maps every key of a client request in place, nested txn ops and
// compares, lock handles and queue prefixes included. It reports whether
// it knows the message; a message without keys (lease grant, member list)
// is not known and needs no mapping.
func (m Mapper) Request(msg any) (known bool, err error) {
	switch r := msg.(type) {
	case *dkvpb.RangeRequest:
		return true, m.rangeReq(r)
	case *dkvpb.PutRequest:
		return true, m.put(r)
	case *dkvpb.DeleteRangeRequest:
		return true, m.del(r)
	case *dkvpb.TxnRequest:
		return true, m.txn(r)
	case *dkvpb.CounterRequest:
		if r.Key, err = m.Key(r.Key); err != nil {
			return true, err
		}
		return true, m.handle(r.Lock)
	case *dkvpb.WatchCreateRequest:
		r.Key, r.RangeEnd, r.Prefix, err = m.Range(r.Key, r.RangeEnd, r.Prefix)
		return true, err
	case *dkvpb.LockAcquireRequest:
		r.Key, err = m.Key(r.Key)
		return true, err
	case *dkvpb.LockReleaseRequest:
		return true, m.handle(r.Handle)
	case *dkvpb.LockCancelRequest:
		r.Key, err = m.Key(r.Key)
		return true, err
	case *dkvpb.LockDescribeRequest:
		r.Key, err = m.Key(r.Key)
		return true, err
	case *dkvpb.RateLimitRequest:
		r.Key, err = m.Key(r.Key)
		return true, err
	case *dkvpb.QueueClaimRequest:
		// A claim scans under its prefix: a default-store prefix of the
		// reserved range would reach into the named stores.
		if m.pre == nil && len(r.QueuePrefix) > 0 && bytes.HasPrefix(reserved, r.QueuePrefix) {
			return true, reservedErr("queue prefix", r.QueuePrefix)
		}
		if r.QueuePrefix, err = m.Key(r.QueuePrefix); err != nil {
			return true, err
		}
		for _, a := range r.Acks {
			if err := m.ack(a); err != nil {
				return true, err
			}
		}
		return true, nil
	case *dkvpb.QueueAckRequest:
		return true, m.ack(r)
	case *dkvpb.QueueAckBatchRequest:
		for _, a := range r.Acks {
			if err := m.ack(a); err != nil {
				return true, err
			}
		}
		return true, nil
	case *dkvpb.LeaseTimeToLiveRequest:
		return true, nil // its keys are filtered in the reply
	}
	return false, nil
}

func (m Mapper) rangeReq(r *dkvpb.RangeRequest) (err error) {
	if r.Key, r.RangeEnd, r.Prefix, err = m.Range(r.Key, r.RangeEnd, r.Prefix); err != nil {
		return err
	}
	return m.handle(r.Lock)
}

func (m Mapper) put(r *dkvpb.PutRequest) (err error) {
	if r.Key, err = m.Key(r.Key); err != nil {
		return err
	}
	return m.handle(r.Lock)
}

func (m Mapper) del(r *dkvpb.DeleteRangeRequest) (err error) {
	if r.Key, r.RangeEnd, r.Prefix, err = m.Range(r.Key, r.RangeEnd, r.Prefix); err != nil {
		return err
	}
	return m.handle(r.Lock)
}

func (m Mapper) txn(t *dkvpb.TxnRequest) (err error) {
	for _, c := range t.Compare {
		if c.Key, c.RangeEnd, _, err = m.Range(c.Key, c.RangeEnd, false); err != nil {
			return err
		}
		if l, ok := c.TargetUnion.(*dkvpb.Compare_Lock); ok {
			if err := m.handle(l.Lock); err != nil {
				return err
			}
		}
	}
	for _, ops := range [][]*dkvpb.RequestOp{t.Success, t.Failure} {
		for _, op := range ops {
			switch r := op.Request.(type) {
			case *dkvpb.RequestOp_RequestRange:
				err = m.rangeReq(r.RequestRange)
			case *dkvpb.RequestOp_RequestPut:
				err = m.put(r.RequestPut)
			case *dkvpb.RequestOp_RequestDeleteRange:
				err = m.del(r.RequestDeleteRange)
			case *dkvpb.RequestOp_RequestTxn:
				err = m.txn(r.RequestTxn)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func (m Mapper) handle(h *dkvpb.LockHandle) (err error) {
	if h == nil {
		return nil
	}
	h.Key, err = m.Key(h.Key)
	return err
}

func (m Mapper) ack(a *dkvpb.QueueAckRequest) (err error) {
	if err := m.handle(a.Handle); err != nil {
		return err
	}
	if len(a.MarkerKey) > 0 {
		if a.MarkerKey, err = m.Key(a.MarkerKey); err != nil {
			return err
		}
	}
	for _, p := range a.Puts {
		if err := m.put(p); err != nil {
			return err
		}
	}
	return nil
}

// Response strips the store prefix from every key of a reply, and drops
// the keys of other stores from a lease's key list. It sets the reply's
// fields to copies and never writes through them: a reply may share its
// key-values and handles with other callers (lock waiters, watchers).
func (m Mapper) Response(msg any) {
	if m.pre == nil {
		if r, ok := msg.(*dkvpb.LeaseTimeToLiveResponse); ok {
			r.Keys = m.ownKeys(r.Keys)
		}
		return
	}
	switch r := msg.(type) {
	case *dkvpb.RangeResponse:
		m.rangeResp(r)
	case *dkvpb.PutResponse:
		r.PrevKv = m.kv(r.PrevKv)
	case *dkvpb.DeleteRangeResponse:
		r.PrevKvs = m.kvs(r.PrevKvs)
	case *dkvpb.TxnResponse:
		m.txnResp(r)
	case *dkvpb.LockAcquireResponse:
		r.Handle = m.outHandle(r.Handle)
		r.Holder = m.outHandle(r.Holder)
	case *dkvpb.LockReleaseResponse:
		r.Next = m.outHandle(r.Next)
	case *dkvpb.LockDescribeResponse:
		r.Holder = m.outHandle(r.Holder)
	case *dkvpb.QueueClaimResponse:
		r.Kv = m.kv(r.Kv)
		r.Handle = m.outHandle(r.Handle)
		more := make([]*dkvpb.QueueClaimedJob, len(r.More))
		for i, j := range r.More {
			more[i] = &dkvpb.QueueClaimedJob{Kv: m.kv(j.Kv), Handle: m.outHandle(j.Handle), Marked: j.Marked}
		}
		r.More = more
	case *dkvpb.LeaseTimeToLiveResponse:
		r.Keys = m.ownKeys(r.Keys)
	}
}

// Watch is r with the store prefix stripped from its keys: a new
// response, since the hub shares events among watchers. The hub sends
// events encoded once for every watcher, as r's unknown fields (package
// watch); those are decoded here, for a named store's watchers only.
func (m Mapper) Watch(r *dkvpb.WatchResponse) *dkvpb.WatchResponse {
	raw := r.ProtoReflect().GetUnknown()
	if m.pre == nil || (len(r.Events) == 0 && len(r.Snapshot) == 0 && len(raw) == 0) {
		return r
	}
	events := r.Events
	if len(raw) > 0 {
		dec := &dkvpb.WatchResponse{}
		if err := proto.Unmarshal(raw, dec); err == nil {
			events = append(append([]*dkvpb.Event(nil), events...), dec.Events...)
		}
	}
	c := &dkvpb.WatchResponse{
		Header: r.Header, WatchId: r.WatchId, Created: r.Created, Canceled: r.Canceled,
		CancelStatus: r.CancelStatus, CancelReason: r.CancelReason, CompactRevision: r.CompactRevision,
		Fragment: r.Fragment, Snapshot: m.kvs(r.Snapshot), SnapshotEnd: r.SnapshotEnd,
	}
	if len(events) > 0 {
		c.Events = make([]*dkvpb.Event, len(events))
		for i, e := range events {
			c.Events[i] = &dkvpb.Event{Type: e.Type, Kv: m.kv(e.Kv), PrevKv: m.kv(e.PrevKv), QueryMarker: e.QueryMarker}
		}
	}
	return c
}

func (m Mapper) ownKeys(in [][]byte) [][]byte {
	out := make([][]byte, 0, len(in))
	for _, k := range in {
		if s, ok := m.Strip(k); ok {
			out = append(out, s)
		}
	}
	return out
}

func (m Mapper) rangeResp(r *dkvpb.RangeResponse) {
	if r != nil {
		r.Kvs = m.kvs(r.Kvs)
	}
}

func (m Mapper) txnResp(t *dkvpb.TxnResponse) {
	if t == nil {
		return
	}
	for _, op := range t.Responses {
		switch r := op.Response.(type) {
		case *dkvpb.ResponseOp_ResponseRange:
			m.rangeResp(r.ResponseRange)
		case *dkvpb.ResponseOp_ResponsePut:
			if r.ResponsePut != nil {
				r.ResponsePut.PrevKv = m.kv(r.ResponsePut.PrevKv)
			}
		case *dkvpb.ResponseOp_ResponseDeleteRange:
			if r.ResponseDeleteRange != nil {
				r.ResponseDeleteRange.PrevKvs = m.kvs(r.ResponseDeleteRange.PrevKvs)
			}
		case *dkvpb.ResponseOp_ResponseTxn:
			m.txnResp(r.ResponseTxn)
		}
	}
}

func (m Mapper) kv(kv *dkvpb.KeyValue) *dkvpb.KeyValue {
	if kv == nil {
		return nil
	}
	return &dkvpb.KeyValue{
		Key: m.strip(kv.Key), Value: kv.Value, CreateRevision: kv.CreateRevision,
		ModRevision: kv.ModRevision, Version: kv.Version, Lease: kv.Lease,
		Labels: kv.Labels,
	}
}

// KVs is kvs as the store sees them: its own keys, prefix stripped;
// other stores' key-values are dropped (a default-store scan of every key
// reaches them). It never writes through kvs.
func (m Mapper) KVs(kvs []*dkvpb.KeyValue) []*dkvpb.KeyValue {
	out := make([]*dkvpb.KeyValue, 0, len(kvs))
	for _, kv := range kvs {
		if _, own := m.Strip(kv.GetKey()); own {
			out = append(out, m.kv(kv))
		}
	}
	return out
}

func (m Mapper) kvs(kvs []*dkvpb.KeyValue) []*dkvpb.KeyValue {
	if kvs == nil {
		return nil
	}
	out := make([]*dkvpb.KeyValue, len(kvs))
	for i, kv := range kvs {
		out[i] = m.kv(kv)
	}
	return out
}

func (m Mapper) outHandle(h *dkvpb.LockHandle) *dkvpb.LockHandle {
	if h == nil {
		return nil
	}
	return &dkvpb.LockHandle{Key: m.strip(h.Key), Owner: h.Owner, Lease: h.Lease, Token: h.Token}
}
