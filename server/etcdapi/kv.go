package etcdapi

import (
	"context"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// kvServer is etcd's KV service over DKV's.
type kvServer struct {
	etcdserverpb.UnimplementedKVServer
	d Deps
}

func (k *kvServer) Range(ctx context.Context, r *etcdserverpb.RangeRequest) (*etcdserverpb.RangeResponse, error) {
	req, post, err := rangeToDKV(r)
	if err != nil {
		return nil, err
	}
	resp, err := unary(ctx, k.d, dkvpb.KV_Range_FullMethodName, req, func(ctx context.Context) (*dkvpb.RangeResponse, error) {
		return k.d.KV.Range(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	out := post(resp)
	if r.Revision != 0 {
		// etcd's header carries the store's revision, not the one read.
		out.Header.Revision = max(out.Header.Revision, k.d.Header().GetRevision())
	}
	return out, nil
}

// rangeToDKV is r as a DKV range, and what turns DKV's reply into etcd's.
// DKV's range has etcd's key, range_end ("\x00": every key >= key), limit,
// revision, sort, serializable, keys_only and count_only semantics; the
// min/max revision filters it lacks are applied here as etcd applies
// them: over the whole (sorted) range, with limit applied after.
func rangeToDKV(r *etcdserverpb.RangeRequest) (*dkvpb.RangeRequest, func(*dkvpb.RangeResponse) *etcdserverpb.RangeResponse, error) {
	if len(r.Key) == 0 {
		return nil, nil, rpctypes.ErrGRPCEmptyKey
	}
	if _, ok := etcdserverpb.RangeRequest_SortOrder_name[int32(r.SortOrder)]; !ok {
		return nil, nil, rpctypes.ErrGRPCInvalidSortOption
	}
	if _, ok := etcdserverpb.RangeRequest_SortTarget_name[int32(r.SortTarget)]; !ok {
		return nil, nil, rpctypes.ErrGRPCInvalidSortOption
	}
	req := &dkvpb.RangeRequest{
		Key: r.Key, RangeEnd: r.RangeEnd, Limit: r.Limit, Revision: r.Revision,
		SortOrder:    dkvpb.RangeRequest_SortOrder(r.SortOrder),
		SortTarget:   dkvpb.RangeRequest_SortTarget(r.SortTarget),
		Serializable: r.Serializable, KeysOnly: r.KeysOnly, CountOnly: r.CountOnly,
	}
	filtered := r.MinModRevision != 0 || r.MaxModRevision != 0 || r.MinCreateRevision != 0 || r.MaxCreateRevision != 0
	if filtered && !r.CountOnly {
		req.Limit = 0
	}
	post := func(resp *dkvpb.RangeResponse) *etcdserverpb.RangeResponse {
		out := &etcdserverpb.RangeResponse{Header: toHeader(resp.GetHeader()), Count: resp.GetCount(), More: resp.GetMore()}
		kvs := resp.GetKvs()
		if filtered && !r.CountOnly {
			keep := kvs[:0]
			for _, kv := range kvs {
				if (r.MinModRevision == 0 || kv.ModRevision >= r.MinModRevision) &&
					(r.MaxModRevision == 0 || kv.ModRevision <= r.MaxModRevision) &&
					(r.MinCreateRevision == 0 || kv.CreateRevision >= r.MinCreateRevision) &&
					(r.MaxCreateRevision == 0 || kv.CreateRevision <= r.MaxCreateRevision) {
					keep = append(keep, kv)
				}
			}
			kvs = keep
			out.More = false
			if r.Limit > 0 && int64(len(kvs)) > r.Limit {
				kvs = kvs[:r.Limit]
				out.More = true
			}
		}
		out.Kvs = toKVs(kvs)
		return out
	}
	return req, post, nil
}

func toKV(kv *dkvpb.KeyValue) *mvccpb.KeyValue {
	if kv == nil {
		return nil
	}
	return &mvccpb.KeyValue{
		Key: kv.Key, Value: kv.Value, CreateRevision: kv.CreateRevision,
		ModRevision: kv.ModRevision, Version: kv.Version, Lease: kv.Lease,
	}
}

func toKVs(kvs []*dkvpb.KeyValue) []*mvccpb.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	out := make([]*mvccpb.KeyValue, len(kvs))
	for i, kv := range kvs {
		out[i] = toKV(kv)
	}
	return out
}

func (k *kvServer) Put(ctx context.Context, r *etcdserverpb.PutRequest) (*etcdserverpb.PutResponse, error) {
	req, err := putToDKV(r)
	if err != nil {
		return nil, err
	}
	resp, err := unary(ctx, k.d, dkvpb.KV_Put_FullMethodName, req, func(ctx context.Context) (*dkvpb.PutResponse, error) {
		return k.d.KV.Put(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	return putFromDKV(resp), nil
}

// putToDKV is r as a DKV put, refused as etcd refuses it.
func putToDKV(r *etcdserverpb.PutRequest) (*dkvpb.PutRequest, error) {
	switch {
	case len(r.Key) == 0:
		return nil, rpctypes.ErrGRPCEmptyKey
	case r.IgnoreValue && len(r.Value) != 0:
		return nil, rpctypes.ErrGRPCValueProvided
	case r.IgnoreLease && r.Lease != 0:
		return nil, rpctypes.ErrGRPCLeaseProvided
	}
	return &dkvpb.PutRequest{
		Key: r.Key, Value: r.Value, Lease: r.Lease, PrevKv: r.PrevKv,
		IgnoreValue: r.IgnoreValue, IgnoreLease: r.IgnoreLease,
	}, nil
}

func putFromDKV(resp *dkvpb.PutResponse) *etcdserverpb.PutResponse {
	return &etcdserverpb.PutResponse{Header: toHeader(resp.GetHeader()), PrevKv: toKV(resp.GetPrevKv())}
}

func (k *kvServer) DeleteRange(ctx context.Context, r *etcdserverpb.DeleteRangeRequest) (*etcdserverpb.DeleteRangeResponse, error) {
	if len(r.Key) == 0 {
		return nil, rpctypes.ErrGRPCEmptyKey
	}
	req := deleteToDKV(r)
	resp, err := unary(ctx, k.d, dkvpb.KV_DeleteRange_FullMethodName, req, func(ctx context.Context) (*dkvpb.DeleteRangeResponse, error) {
		return k.d.KV.DeleteRange(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	return deleteFromDKV(resp), nil
}

func deleteToDKV(r *etcdserverpb.DeleteRangeRequest) *dkvpb.DeleteRangeRequest {
	return &dkvpb.DeleteRangeRequest{Key: r.Key, RangeEnd: r.RangeEnd, PrevKv: r.PrevKv}
}

func deleteFromDKV(resp *dkvpb.DeleteRangeResponse) *etcdserverpb.DeleteRangeResponse {
	return &etcdserverpb.DeleteRangeResponse{Header: toHeader(resp.GetHeader()), Deleted: resp.GetDeleted(), PrevKvs: toKVs(resp.GetPrevKvs())}
}

func (k *kvServer) Compact(ctx context.Context, r *etcdserverpb.CompactionRequest) (*etcdserverpb.CompactionResponse, error) {
	// physical is accepted: DKV's compaction is durable once applied.
	req := &dkvpb.CompactRequest{Revision: r.Revision}
	resp, err := unary(ctx, k.d, dkvpb.KV_Compact_FullMethodName, req, func(ctx context.Context) (*dkvpb.CompactResponse, error) {
		return k.d.KV.Compact(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	return &etcdserverpb.CompactionResponse{Header: toHeader(resp.GetHeader())}, nil
}

// rangeStreamChunkBytes bounds the keys and values of one RangeStream
// message (a key larger than that goes alone).
const rangeStreamChunkBytes = 1 << 20

// RangeStream is etcd 3.7's streamed Range: the reply of Range at one
// revision, its kvs cut into messages of about rangeStreamChunkBytes, the
// header, count and more on the last one only (merged, the messages are
// Range's reply). It is authorized and read exactly as Range.
func (k *kvServer) RangeStream(r *etcdserverpb.RangeRequest, ss etcdserverpb.KV_RangeStreamServer) error {
	resp, err := k.Range(ss.Context(), r)
	if err != nil {
		return err
	}
	kvs := resp.Kvs
	for {
		n, size := 0, 0
		for n < len(kvs) && (n == 0 || size+len(kvs[n].Key)+len(kvs[n].Value) <= rangeStreamChunkBytes) {
			size += len(kvs[n].Key) + len(kvs[n].Value)
			n++
		}
		chunk := &etcdserverpb.RangeResponse{Kvs: kvs[:n]}
		kvs = kvs[n:]
		if len(kvs) == 0 {
			chunk.Header, chunk.More, chunk.Count = resp.Header, resp.More, resp.Count
		}
		if err := ss.Send(&etcdserverpb.RangeStreamResponse{RangeResponse: chunk}); err != nil {
			return err
		}
		if len(kvs) == 0 {
			return nil
		}
	}
}
