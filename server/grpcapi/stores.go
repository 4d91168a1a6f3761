package grpcapi

import (
	"context"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/state"
	"github.com/dkv-io/dkv/internal/storekeys"
)

// storeService implements dkvpb.StoreServer: named stores
// (docs/data-model.md) are created, resized and deleted through raft, and
// listed from the applied state.
type storeService struct {
	dkvpb.UnimplementedStoreServer
	n Node
}

func (ss *storeService) Create(ctx context.Context, req *dkvpb.StoreCreateRequest) (*dkvpb.StoreCreateResponse, error) {
	req.SetQuota = false
	return Propose[*dkvpb.StoreCreateResponse](ctx, ss.n, &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_StoreCreate{StoreCreate: req}})
}

func (ss *storeService) SetQuota(ctx context.Context, req *dkvpb.StoreCreateRequest) (*dkvpb.StoreCreateResponse, error) {
	req.SetQuota = true
	return Propose[*dkvpb.StoreCreateResponse](ctx, ss.n, &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_StoreCreate{StoreCreate: req}})
}

func (ss *storeService) Delete(ctx context.Context, req *dkvpb.StoreDeleteRequest) (*dkvpb.StoreDeleteResponse, error) {
	return Propose[*dkvpb.StoreDeleteResponse](ctx, ss.n, &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_StoreDelete{StoreDelete: req}})
}

func (ss *storeService) List(ctx context.Context, _ *dkvpb.StoreListRequest) (*dkvpb.StoreListResponse, error) {
	if err := ss.n.WaitLinearizable(ctx); err != nil {
		return nil, err
	}
	stores, err := ss.n.Applied().Latest().Stores()
	if err != nil {
		return nil, dkverr.New(dkverr.Internal, "listing stores: %v", err)
	}
	return &dkvpb.StoreListResponse{Header: ss.n.Header(0), Stores: stores}, nil
}

func (ss *storeService) Stats(ctx context.Context, req *dkvpb.StoreStatsRequest) (*dkvpb.StoreStatsResponse, error) {
	if err := storekeys.ValidName(req.GetName()); err != nil {
		return nil, err
	}
	if err := ss.n.WaitLinearizable(ctx); err != nil {
		return nil, err
	}
	info, ok, err := ss.n.Applied().Latest().Store(req.GetName())
	if err != nil {
		return nil, dkverr.New(dkverr.Internal, "reading store %q: %v", req.GetName(), err)
	}
	if !ok {
		return nil, state.NotExistError(req.GetName())
	}
	return &dkvpb.StoreStatsResponse{Header: ss.n.Header(0), Store: info}, nil
}
