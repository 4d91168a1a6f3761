package etcdapi

import (
	"context"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func (k *kvServer) Txn(ctx context.Context, r *etcdserverpb.TxnRequest) (*etcdserverpb.TxnResponse, error) {
	if err := checkTxnOps(r, k.d.MaxTxnOps); err != nil {
		return nil, err
	}
	req, err := txnToDKV(r)
	if err != nil {
		return nil, err
	}
	resp, err := unary(ctx, k.d, dkvpb.KV_Txn_FullMethodName, req, func(ctx context.Context) (*dkvpb.TxnResponse, error) {
		return k.d.KV.Txn(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	return txnFromDKV(r, resp), nil
}

// checkTxnOps refuses a txn over etcd's op limit as etcd counts: the
// largest of its compares, success ops and failure ops, each nested txn
// counted against what its parent leaves.
func checkTxnOps(r *etcdserverpb.TxnRequest, max int) error {
	n := max3(len(r.Compare), len(r.Success), len(r.Failure))
	if n > max {
		return rpctypes.ErrGRPCTooManyOps
	}
	for _, ops := range [][]*etcdserverpb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			if t := op.GetRequestTxn(); t != nil {
				if err := checkTxnOps(t, max-n); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func max3(a, b, c int) int { return max(a, max(b, c)) }

// txnToDKV is r as a DKV txn: the same compares (DKV's enums share
// etcd's numbers for result and the version, create, mod and value
// targets; lease and range_end were added for etcd) and ops.
func txnToDKV(r *etcdserverpb.TxnRequest) (*dkvpb.TxnRequest, error) {
	out := &dkvpb.TxnRequest{Compare: make([]*dkvpb.Compare, 0, len(r.Compare))}
	for _, c := range r.Compare {
		if c == nil {
			return nil, status.Error(codes.InvalidArgument, etcdPrefix+"compare is empty")
		}
		dc := &dkvpb.Compare{Key: c.Key, RangeEnd: c.RangeEnd}
		switch c.Result {
		case etcdserverpb.Compare_EQUAL:
			dc.Result = dkvpb.Compare_EQUAL
		case etcdserverpb.Compare_GREATER:
			dc.Result = dkvpb.Compare_GREATER
		case etcdserverpb.Compare_LESS:
			dc.Result = dkvpb.Compare_LESS
		case etcdserverpb.Compare_NOT_EQUAL:
			dc.Result = dkvpb.Compare_NOT_EQUAL
		default:
			return nil, status.Errorf(codes.InvalidArgument, etcdPrefix+"unknown compare result %d", c.Result)
		}
		switch c.Target {
		case etcdserverpb.Compare_VERSION:
			dc.Target, dc.TargetUnion = dkvpb.Compare_VERSION, &dkvpb.Compare_Version{Version: c.GetVersion()}
		case etcdserverpb.Compare_CREATE:
			dc.Target, dc.TargetUnion = dkvpb.Compare_CREATE, &dkvpb.Compare_CreateRevision{CreateRevision: c.GetCreateRevision()}
		case etcdserverpb.Compare_MOD:
			dc.Target, dc.TargetUnion = dkvpb.Compare_MOD, &dkvpb.Compare_ModRevision{ModRevision: c.GetModRevision()}
		case etcdserverpb.Compare_VALUE:
			dc.Target, dc.TargetUnion = dkvpb.Compare_VALUE, &dkvpb.Compare_Value{Value: c.GetValue()}
		case etcdserverpb.Compare_LEASE:
			dc.Target, dc.TargetUnion = dkvpb.Compare_LEASE, &dkvpb.Compare_Lease{Lease: c.GetLease()}
		default:
			return nil, status.Errorf(codes.InvalidArgument, etcdPrefix+"unknown compare target %d", c.Target)
		}
		out.Compare = append(out.Compare, dc)
	}
	var err error
	if out.Success, err = opsToDKV(r.Success); err != nil {
		return nil, err
	}
	if out.Failure, err = opsToDKV(r.Failure); err != nil {
		return nil, err
	}
	return out, nil
}

func opsToDKV(ops []*etcdserverpb.RequestOp) ([]*dkvpb.RequestOp, error) {
	out := make([]*dkvpb.RequestOp, 0, len(ops))
	for _, op := range ops {
		var d *dkvpb.RequestOp
		switch o := op.GetRequest().(type) {
		case *etcdserverpb.RequestOp_RequestRange:
			rr, _, err := rangeToDKV(o.RequestRange)
			if err != nil {
				return nil, err
			}
			if f := o.RequestRange; f.MinModRevision != 0 || f.MaxModRevision != 0 || f.MinCreateRevision != 0 || f.MaxCreateRevision != 0 {
				rr.Limit = f.Limit // filtered after, in txnFromDKV
				if !f.CountOnly {
					rr.Limit = 0
				}
			}
			d = &dkvpb.RequestOp{Request: &dkvpb.RequestOp_RequestRange{RequestRange: rr}}
		case *etcdserverpb.RequestOp_RequestPut:
			p, err := putToDKV(o.RequestPut)
			if err != nil {
				return nil, err
			}
			d = &dkvpb.RequestOp{Request: &dkvpb.RequestOp_RequestPut{RequestPut: p}}
		case *etcdserverpb.RequestOp_RequestDeleteRange:
			if len(o.RequestDeleteRange.Key) == 0 {
				return nil, rpctypes.ErrGRPCEmptyKey
			}
			d = &dkvpb.RequestOp{Request: &dkvpb.RequestOp_RequestDeleteRange{RequestDeleteRange: deleteToDKV(o.RequestDeleteRange)}}
		case *etcdserverpb.RequestOp_RequestTxn:
			t, err := txnToDKV(o.RequestTxn)
			if err != nil {
				return nil, err
			}
			d = &dkvpb.RequestOp{Request: &dkvpb.RequestOp_RequestTxn{RequestTxn: t}}
		default:
			return nil, status.Error(codes.InvalidArgument, etcdPrefix+"txn op is empty")
		}
		out = append(out, d)
	}
	return out, nil
}

// txnFromDKV is DKV's txn reply as etcd's, r the request (for the range
// filters applied here). Every op's header, as in etcd, holds only the
// txn's revision: the cluster, member and term are the outer header's.
func txnFromDKV(r *etcdserverpb.TxnRequest, resp *dkvpb.TxnResponse) *etcdserverpb.TxnResponse {
	out := &etcdserverpb.TxnResponse{Header: toHeader(resp.GetHeader()), Succeeded: resp.GetSucceeded()}
	out.Responses = opsFromDKV(r, resp)
	return out
}

func opsFromDKV(r *etcdserverpb.TxnRequest, resp *dkvpb.TxnResponse) []*etcdserverpb.ResponseOp {
	var out []*etcdserverpb.ResponseOp
	rev := resp.GetHeader().GetRevision()
	h := &etcdserverpb.ResponseHeader{Revision: rev}
	ops := r.Success
	if !resp.GetSucceeded() {
		ops = r.Failure
	}
	for i, op := range resp.GetResponses() {
		var req *etcdserverpb.RequestOp
		if i < len(ops) {
			req = ops[i]
		}
		var e *etcdserverpb.ResponseOp
		switch o := op.GetResponse().(type) {
		case *dkvpb.ResponseOp_ResponseRange:
			_, post, err := rangeToDKV(req.GetRequestRange())
			var rr *etcdserverpb.RangeResponse
			if err == nil {
				rr = post(o.ResponseRange)
			} else { // cannot happen: the request was translated before
				rr = &etcdserverpb.RangeResponse{Kvs: toKVs(o.ResponseRange.GetKvs()), Count: o.ResponseRange.GetCount(), More: o.ResponseRange.GetMore()}
			}
			rr.Header = h // etcd's: the store's revision, even for a past read
			e = &etcdserverpb.ResponseOp{Response: &etcdserverpb.ResponseOp_ResponseRange{ResponseRange: rr}}
		case *dkvpb.ResponseOp_ResponsePut:
			p := putFromDKV(o.ResponsePut)
			p.Header = h
			e = &etcdserverpb.ResponseOp{Response: &etcdserverpb.ResponseOp_ResponsePut{ResponsePut: p}}
		case *dkvpb.ResponseOp_ResponseDeleteRange:
			d := deleteFromDKV(o.ResponseDeleteRange)
			d.Header = h
			e = &etcdserverpb.ResponseOp{Response: &etcdserverpb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: d}}
		case *dkvpb.ResponseOp_ResponseTxn:
			o.ResponseTxn.Header = resp.GetHeader()
			t := &etcdserverpb.TxnResponse{Header: h, Succeeded: o.ResponseTxn.GetSucceeded(), Responses: opsFromDKV(req.GetRequestTxn(), o.ResponseTxn)}
			e = &etcdserverpb.ResponseOp{Response: &etcdserverpb.ResponseOp_ResponseTxn{ResponseTxn: t}}
		default:
			continue
		}
		out = append(out, e)
	}
	return out
}
