package grpcapi

import (
	"context"
	"errors"
	"strconv"
	"strings"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/mvcc"
	"github.com/dkv-io/dkv/internal/storekeys"
	"google.golang.org/protobuf/proto"
)

// queryService implements dkvpb.QueryServer: label queries and the
// indexes that serve them (docs/data-model.md). Index changes go
// through raft; queries are reads, linearizable unless serializable,
// served from one Pebble snapshot so index entries and keys agree.
type queryService struct {
	dkvpb.UnimplementedQueryServer
	a *API
}

// storePrefix maps prefix, a key prefix of the caller's store (the
// dkv-store metadata), to the physical keys it covers.
func (qs *queryService) storePrefix(ctx context.Context, prefix []byte) (storekeys.Mapper, []byte, error) {
	m, err := qs.a.n.StoreOf(ctx)
	if err != nil {
		return m, nil, err
	}
	p, err := m.KeyPrefix(prefix)
	return m, p, err
}

func (qs *queryService) CreateIndex(ctx context.Context, req *dkvpb.IndexCreateRequest) (*dkvpb.IndexCreateResponse, error) {
	m, p, err := qs.storePrefix(ctx, req.GetPrefix())
	if err != nil {
		return nil, err
	}
	req = proto.Clone(req).(*dkvpb.IndexCreateRequest)
	req.Prefix = p
	resp, err := Propose[*dkvpb.IndexCreateResponse](ctx, qs.a.n, &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_IndexCreate{IndexCreate: req}})
	if err != nil {
		return nil, storeErr(m, err)
	}
	if ix := resp.GetIndex(); ix != nil {
		// A copy: the applied result may be shared with other waiters.
		c := proto.Clone(ix).(*dkvpb.IndexInfo)
		c.Prefix, _ = m.Strip(c.GetPrefix())
		resp = &dkvpb.IndexCreateResponse{Header: resp.Header, Index: c, Built: resp.Built}
	}
	return resp, nil
}

func (qs *queryService) DropIndex(ctx context.Context, req *dkvpb.IndexDropRequest) (*dkvpb.IndexDropResponse, error) {
	m, p, err := qs.storePrefix(ctx, req.GetPrefix())
	if err != nil {
		return nil, err
	}
	req = proto.Clone(req).(*dkvpb.IndexDropRequest)
	req.Prefix = p
	resp, err := Propose[*dkvpb.IndexDropResponse](ctx, qs.a.n, &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_IndexDrop{IndexDrop: req}})
	return resp, storeErr(m, err)
}

func (qs *queryService) ListIndexes(ctx context.Context, _ *dkvpb.ListIndexesRequest) (*dkvpb.ListIndexesResponse, error) {
	if err := qs.a.n.WaitLinearizable(ctx); err != nil {
		return nil, err
	}
	snap := qs.a.n.Applied().Snapshot()
	defer snap.Close()
	ds, err := snap.Indexes()
	if err != nil {
		return nil, err
	}
	m, err := qs.a.n.StoreOf(ctx)
	if err != nil {
		return nil, err
	}
	resp := &dkvpb.ListIndexesResponse{Header: qs.a.n.Header(0)}
	for _, d := range ds {
		info := d.Info()
		own, ok := m.Strip(info.GetPrefix())
		if !ok {
			continue // another store's index
		}
		info.Prefix = own
		resp.Indexes = append(resp.Indexes, info)
	}
	return resp, nil
}

func (qs *queryService) Query(ctx context.Context, req *dkvpb.QueryRequest) (*dkvpb.QueryResponse, error) {
	q, err := mvcc.ParseQuery(req.GetQuery())
	if err != nil {
		return nil, err
	}
	clientPrefix := q.Prefix
	store, prefix, err := qs.storePrefix(ctx, q.Prefix)
	if err != nil {
		return nil, err
	}
	q.Prefix = prefix
	// The caller must be allowed to read every key of the store under the
	// query's prefix.
	nk, ne, np, err := store.Range(clientPrefix, nil, true)
	if err != nil {
		return nil, err
	}
	need := &dkvpb.RangeRequest{Key: nk, RangeEnd: ne, Prefix: np}
	if ctx, err = qs.a.n.Authorize(ctx, dkvpb.Query_Query_FullMethodName, need); err != nil {
		return nil, err
	}
	// Reads wait like Range does (UnsafeLocalReads included).
	if !req.GetSerializable() && !qs.a.o.UnsafeLocalReads {
		if err := qs.a.n.WaitLinearizable(ctx); err != nil {
			return nil, err
		}
		if err := qs.a.n.Recheck(ctx, need); err != nil {
			return nil, err
		}
	}
	snap := qs.a.n.Applied().Snapshot()
	defer snap.Close()
	res, err := snap.Query(ctx, q, mvcc.QueryOptions{
		Revision: req.GetRevision(), Limit: req.GetLimit(), OrderBy: req.GetOrderBy(),
		Scan: req.GetScan(), KeysOnly: req.GetKeysOnly(), Continuation: req.GetContinuation(),
	})
	if err != nil {
		return nil, storeErr(store, err)
	}
	resp := &dkvpb.QueryResponse{
		Header: qs.a.n.CompleteHeader(&dkvpb.ResponseHeader{Revision: res.Revision}),
		// The default store's query of every key reaches named stores'
		// keys too: KVs drops them (a page may then hold fewer keys).
		Kvs: store.KVs(res.KVs), Continuation: res.Continuation, More: res.More, Plan: storePlan(store, res.Plan),
	}
	if err := qs.a.replyFits(&dkvpb.RangeResponse{Kvs: resp.Kvs}); err != nil {
		return nil, err
	}
	return resp, nil
}

// storePlan is plan as the store's caller sees it: without the store's
// physical key prefix.
func storePlan(m storekeys.Mapper, plan string) string {
	if m.Default() {
		return plan
	}
	pre, _ := m.Span()
	return strings.ReplaceAll(plan, string(pre), "")
}

// storeErr is err as the store's caller sees it: a message naming the
// store's physical prefix (no index under it) names the store's own
// prefix instead, and its hint the store.
func storeErr(m storekeys.Mapper, err error) error {
	var de *dkverr.Error
	if m.Default() || !errors.As(err, &de) {
		return err
	}
	pre, _ := m.Span()
	quoted := strconv.Quote(string(pre))
	c := *de
	c.Msg = strings.ReplaceAll(c.Msg, quoted[1:len(quoted)-1], "")
	c.Msg = strings.ReplaceAll(c.Msg, string(pre), "")
	c.Msg = strings.ReplaceAll(c.Msg, "dkv index create ", "dkv --store "+m.Name()+" index create ")
	return &c
}
