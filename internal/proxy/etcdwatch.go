package proxy

import (
	"io"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/etcderr"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// etcdWatchServer answers etcd's Watch service with the same groups as
// DKV's: a member serves etcd's Watch as DKV's watch stream with each
// request and response translated (server/etcdapi, watch.go), so the
// proxy translates the same way at the edge of a local stream, and an
// etcd watch is a local watch like any other. It shares an upstream DKV
// watch with every local watch, of either API, whose metadata and
// translated request match; the member checks the caller's token (etcd
// clients send it as metadata "token", which DKV reads too) for that
// range when it creates the upstream watch, as for a direct etcd watch.
type etcdWatchServer struct {
	etcdserverpb.UnimplementedWatchServer
	h *watchHub
}

func (e *etcdWatchServer) Watch(stream etcdserverpb.Watch_WatchServer) error {
	ls := e.h.newStream(stream.Context(), true)
	defer ls.close()
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				if err != io.EOF {
					ls.fail(err)
				}
				return // half-close: the watches keep running
			}
			switch r := req.GetRequestUnion().(type) {
			case *etcdserverpb.WatchRequest_CreateRequest:
				// etcd's clients match created responses to their
				// create requests by order (clientv3 gives each the id
				// of the next one), and a member answers each create
				// before it reads the next request: so does the proxy,
				// though a watch that joins a created group could be
				// answered before one whose group waits for its
				// upstream watch.
				m := e.h.create(ls, fromEtcdCreate(r.CreateRequest))
				if m != nil {
					select {
					case <-m.answered:
					case <-stream.Context().Done():
						return
					case <-e.h.p.ctx.Done():
						return
					}
				}
			case *etcdserverpb.WatchRequest_CancelRequest:
				ls.cancel(r.CancelRequest.GetWatchId())
			case *etcdserverpb.WatchRequest_ProgressRequest:
				ls.requestProgress()
			}
			// An empty request: etcd ignores it too.
		}
	}()
	return etcderr.FromDKV(ls.pump(stream.Context(), func(r proto.Message) error { return stream.Send(r.(*etcdserverpb.WatchResponse)) }))
}

// fromEtcdCreate is c as the member's etcd API hands it to DKV's watch
// (server/etcdapi's watchStream.Recv), so that the upstream watch is the
// one a direct etcd watch would be, and a DKV watch of the same range and
// options has the same group key.
func fromEtcdCreate(c *etcdserverpb.WatchCreateRequest) *dkvpb.WatchCreateRequest {
	d := &dkvpb.WatchCreateRequest{
		Key: c.Key, RangeEnd: c.RangeEnd, StartRevision: c.StartRevision,
		PrevKv: c.PrevKv, ProgressNotify: c.ProgressNotify, WatchId: c.WatchId,
		// etcd's fragment is a flag: split what would not fit in one
		// message, which DKV always does (and the proxy keeps the
		// pieces of a revision together).
	}
	for _, f := range c.Filters {
		switch f {
		case etcdserverpb.WatchCreateRequest_NOPUT:
			d.FilterPuts = true
		case etcdserverpb.WatchCreateRequest_NODELETE:
			d.FilterDeletes = true
		}
	}
	return d
}

// toEtcdWatchResponses is r as a member's etcd API sends it
// (server/etcdapi's watchStream.Send). A watch refused because its start
// revision is compacted is, in etcd, created first and then canceled
// with compact_revision: two responses.
func toEtcdWatchResponses(r *dkvpb.WatchResponse) []proto.Message {
	h := toEtcdHeader(r.GetHeader())
	if r.GetCreated() && r.GetCanceled() && r.GetCompactRevision() != 0 {
		// etcd's cancel is not at a revision: its header has none.
		ch := &etcdserverpb.ResponseHeader{ClusterId: h.ClusterId, MemberId: h.MemberId, RaftTerm: h.RaftTerm}
		return []proto.Message{
			&etcdserverpb.WatchResponse{Header: h, WatchId: r.GetWatchId(), Created: true},
			&etcdserverpb.WatchResponse{Header: ch, WatchId: r.GetWatchId(), Canceled: true, CompactRevision: r.GetCompactRevision()},
		}
	}
	out := toEtcdWatchResponse(r)
	out.Header = h
	return []proto.Message{out}
}

// toEtcdWatchResponse is r in etcd's form, events included.
func toEtcdWatchResponse(r *dkvpb.WatchResponse) *etcdserverpb.WatchResponse {
	out := &etcdserverpb.WatchResponse{
		Header: toEtcdHeader(r.GetHeader()), WatchId: r.GetWatchId(), Created: r.GetCreated(), Canceled: r.GetCanceled(),
		CompactRevision: r.GetCompactRevision(), CancelReason: etcdCancelReason(r), Fragment: r.GetFragment(),
	}
	if len(r.GetEvents()) > 0 {
		out.Events = make([]*mvccpb.Event, len(r.Events))
		for i, e := range r.Events {
			out.Events[i] = &mvccpb.Event{Type: mvccpb.Event_EventType(e.GetType()), Kv: toEtcdKV(e.GetKv()), PrevKv: toEtcdKV(e.GetPrevKv())}
		}
	}
	return out
}

// etcdEventsFor is e, a response of events, for local watch id from its
// i-th event on. The messages it points to are shared and never changed.
func etcdEventsFor(e *etcdserverpb.WatchResponse, id int64, i int) *etcdserverpb.WatchResponse {
	return &etcdserverpb.WatchResponse{Header: e.Header, WatchId: id, Fragment: e.Fragment, Events: e.Events[i:]}
}

// toEtcdHeader is a DKV header as etcd's, as the members' etcd API gives
// it: cluster and member ids, revision and raft term. nil gives an empty
// header (etcd clients expect one on every response).
func toEtcdHeader(h *dkvpb.ResponseHeader) *etcdserverpb.ResponseHeader {
	if h == nil {
		return &etcdserverpb.ResponseHeader{}
	}
	return &etcdserverpb.ResponseHeader{ClusterId: h.GetClusterId(), MemberId: h.GetMemberId(), Revision: h.GetRevision(), RaftTerm: h.GetRaftTerm()}
}

func toEtcdKV(kv *dkvpb.KeyValue) *mvccpb.KeyValue {
	if kv == nil {
		return nil
	}
	return &mvccpb.KeyValue{
		Key: kv.Key, Value: kv.Value, CreateRevision: kv.CreateRevision,
		ModRevision: kv.ModRevision, Version: kv.Version, Lease: kv.Lease,
	}
}

// etcdCancelReason is a canceled watch's reason as the members' etcd API
// words it: DKV's status and reason through etcderr.FromDKV.
func etcdCancelReason(r *dkvpb.WatchResponse) string {
	if r.GetCancelStatus() == "" {
		return r.GetCancelReason()
	}
	for c := dkverr.Code(0); int(c) < dkverr.NumCodes; c++ {
		if c.Reason() == r.GetCancelStatus() {
			return status.Convert(etcderr.FromDKV(&dkverr.Error{Code: c, Msg: r.GetCancelReason()})).Message()
		}
	}
	return r.GetCancelReason()
}
