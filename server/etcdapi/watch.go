package etcdapi

import (
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// watchServer is etcd's Watch service: DKV's watch stream, with each
// request and response translated on the way through (watchStream). DKV's
// watches already have etcd's semantics: events in revision order, one
// response per revision (split only past the message limit, marked
// fragment; consecutive revisions may share a response, as in etcd's
// catch-up), start_revision 0 meaning now, a future start_revision
// waiting for it, client- or server-chosen ids (DKV's server-chosen ids
// start at 1, etcd's at 0), progress notification and
// requests, prev_kv and the put/delete filters.
type watchServer struct {
	etcdserverpb.UnimplementedWatchServer
	d Deps
}

func (w *watchServer) Watch(stream etcdserverpb.Watch_WatchServer) error {
	if err := w.d.requireLeader(stream.Context()); err != nil {
		return err
	}
	return toEtcdErr(w.d.Stream(nil, stream, dkvpb.Watch_Watch_FullMethodName, func(_ any, _ grpc.ServerStream) error {
		return w.d.Watch.Watch(&watchStream{ServerStream: stream, es: stream})
	}))
}

// watchStream is the etcd stream as DKV's watch service sees it.
type watchStream struct {
	grpc.ServerStream
	es etcdserverpb.Watch_WatchServer
}

func (s *watchStream) Recv() (*dkvpb.WatchRequest, error) {
	for {
		r, err := s.es.Recv()
		if err != nil {
			return nil, err
		}
		switch u := r.GetRequestUnion().(type) {
		case *etcdserverpb.WatchRequest_CreateRequest:
			c := u.CreateRequest
			d := &dkvpb.WatchCreateRequest{
				Key: c.Key, RangeEnd: c.RangeEnd, StartRevision: c.StartRevision,
				PrevKv: c.PrevKv, ProgressNotify: c.ProgressNotify, WatchId: c.WatchId,
				// etcd's fragment is a flag: split what would not fit in
				// one message, which DKV always does.
			}
			for _, f := range c.Filters {
				switch f {
				case etcdserverpb.WatchCreateRequest_NOPUT:
					d.FilterPuts = true
				case etcdserverpb.WatchCreateRequest_NODELETE:
					d.FilterDeletes = true
				}
			}
			return &dkvpb.WatchRequest{RequestUnion: &dkvpb.WatchRequest_CreateRequest{CreateRequest: d}}, nil
		case *etcdserverpb.WatchRequest_CancelRequest:
			return &dkvpb.WatchRequest{RequestUnion: &dkvpb.WatchRequest_CancelRequest{CancelRequest: &dkvpb.WatchCancelRequest{WatchId: u.CancelRequest.WatchId}}}, nil
		case *etcdserverpb.WatchRequest_ProgressRequest:
			return &dkvpb.WatchRequest{RequestUnion: &dkvpb.WatchRequest_ProgressRequest{ProgressRequest: &dkvpb.WatchProgressRequest{}}}, nil
		}
		// An empty request: etcd ignores it too.
	}
}

// Send translates one DKV watch response. A watch refused because its
// start revision is compacted is, in etcd, created first and then
// canceled with compact_revision: two responses, so clients that wait
// for the creation (clientv3) see the compaction as the watch's error.
func (s *watchStream) Send(r *dkvpb.WatchResponse) error {
	h := toHeader(r.GetHeader())
	if r.GetCreated() && r.GetCanceled() && r.GetCompactRevision() != 0 {
		if err := s.es.Send(&etcdserverpb.WatchResponse{Header: h, WatchId: r.GetWatchId(), Created: true}); err != nil {
			return err
		}
		// etcd's cancel is not at a revision: its header has none.
		ch := &etcdserverpb.ResponseHeader{ClusterId: h.ClusterId, MemberId: h.MemberId, RaftTerm: h.RaftTerm}
		return s.es.Send(&etcdserverpb.WatchResponse{Header: ch, WatchId: r.GetWatchId(), Canceled: true, CompactRevision: r.GetCompactRevision()})
	}
	if raw := r.ProtoReflect().GetUnknown(); len(raw) > 0 {
		// The hub encodes events once for every watcher and hands them
		// over as the raw bytes of field events.
		var evs dkvpb.WatchResponse
		if err := proto.Unmarshal(raw, &evs); err != nil {
			return status.Errorf(codes.Internal, etcdPrefix+"decoding watch events: %v", err)
		}
		r = &dkvpb.WatchResponse{Header: r.Header, WatchId: r.WatchId, Created: r.Created, Canceled: r.Canceled,
			CompactRevision: r.CompactRevision, CancelReason: r.CancelReason, Fragment: r.Fragment,
			Events: append(r.Events, evs.Events...)}
	}
	out := &etcdserverpb.WatchResponse{
		Header: h, WatchId: r.GetWatchId(), Created: r.GetCreated(), Canceled: r.GetCanceled(),
		CompactRevision: r.GetCompactRevision(), CancelReason: cancelReason(r), Fragment: r.GetFragment(),
	}
	if len(r.GetEvents()) > 0 {
		out.Events = make([]*mvccpb.Event, len(r.Events))
		for i, e := range r.Events {
			out.Events[i] = &mvccpb.Event{Type: mvccpb.Event_EventType(e.GetType()), Kv: toKV(e.GetKv()), PrevKv: toKV(e.GetPrevKv())}
		}
	}
	return s.es.Send(out)
}

// cancelReason is a refused watch's reason as etcd words it (clientv3
// turns an etcd reason back into its rpctypes error): DKV's status and
// reason through toEtcdErr.
func cancelReason(r *dkvpb.WatchResponse) string {
	if r.GetCancelStatus() == "" {
		return r.GetCancelReason()
	}
	for c := dkverr.Code(0); int(c) < dkverr.NumCodes; c++ {
		if c.Reason() == r.GetCancelStatus() {
			return status.Convert(toEtcdErr(&dkverr.Error{Code: c, Msg: r.GetCancelReason()})).Message()
		}
	}
	return r.GetCancelReason()
}
