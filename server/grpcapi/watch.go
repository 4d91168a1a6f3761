package grpcapi

import (
	"context"
	"errors"
	"io"
	"strconv"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/mvcc"
	"github.com/dkv-io/dkv/internal/storekeys"
	"github.com/dkv-io/dkv/internal/watch"
	"google.golang.org/protobuf/proto"
)

// Snapshot chunks: at most this many keys or bytes per response.
const (
	snapshotChunkKeys  = 1000
	snapshotChunkBytes = 1 << 20
)

// watchService implements dkvpb.WatchServer over the node's watch hub.
type watchService struct {
	dkvpb.UnimplementedWatchServer
	a *API
}

func (ws *watchService) Watch(stream dkvpb.Watch_WatchServer) error {
	n, o := ws.a.n, ws.a.o
	ctx := stream.Context()
	store, err := n.StoreOf(ctx)
	if err != nil {
		return err
	}
	stream = storeWatchStream{stream, store}
	st := n.WatchStream()
	defer st.Close()

	direct := make(chan *dkvpb.WatchResponse, 16) // responses of watches that do not exist
	recvErr := make(chan error, 1)
	retick := make(chan struct{}, 1)
	recvDone := n.WatchRecvStarted()
	go func() {
		defer recvDone()
		for {
			req, err := stream.Recv()
			if err == io.EOF {
				return // half-close: the watches keep running
			}
			if err != nil {
				recvErr <- err
				return
			}
			switch r := req.GetRequestUnion().(type) {
			case *dkvpb.WatchRequest_CreateRequest:
				if resp := ws.create(ctx, st, r.CreateRequest); resp != nil {
					select {
					case direct <- resp:
					case <-ctx.Done():
						return
					}
				}
				select {
				case retick <- struct{}{}:
				default:
				}
			case *dkvpb.WatchRequest_CancelRequest:
				st.Cancel(r.CancelRequest.GetWatchId())
			case *dkvpb.WatchRequest_ProgressRequest:
				st.RequestProgress()
			}
		}
	}()

	const maxTick = time.Second
	grace := o.LeaderGrace
	tickEvery := min(maxTick, grace/2)
	tick := time.NewTicker(tickEvery)
	defer tick.Stop()
	var noLeaderSince time.Time
	// The auth view the stream's caller was last checked against: after
	// an auth change the caller is checked again before anything more is
	// sent. Events are published only after the entries before them are
	// applied, so none that follows a revocation goes out.
	authView := n.AuthView()
	authOK := func() error {
		v := n.AuthView()
		if v == authView {
			return nil
		}
		authView = v
		_, err := n.Authorize(ctx, dkvpb.Watch_Watch_FullMethodName, &dkvpb.LeaseKeepAliveRequest{})
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-n.Stopping():
			return dkverr.New(dkverr.Unavailable, "node %s is stopping", o.MemberName)
		case err := <-recvErr:
			return err
		case r := <-direct:
			if err := stream.Send(r); err != nil {
				return err
			}
		case <-st.Ready():
			// A member whose state diverged sends nothing more: it ends
			// the stream like a request it refuses (Unavailable, naming
			// the CORRUPT alarm), and the client resumes elsewhere.
			if err := n.CorruptRefusal(); err != nil {
				return err
			}
			if err := authOK(); err != nil {
				return err
			}
			for rs := st.Pop(); rs != nil; rs = st.Pop() {
				for _, r := range rs {
					if err := stream.Send(r); err != nil {
						return err
					}
				}
			}
		case <-retick:
			if d := st.NotifyIdle(time.Now()); d > 0 {
				tickEvery = min(tickEvery, max(d/4, 10*time.Millisecond))
				tick.Reset(tickEvery)
			}
		case now := <-tick.C:
			if err := n.CorruptRefusal(); err != nil {
				return err // an idle stream too, within a tick
			}
			st.NotifyIdle(now)
			if !n.HasLeader() {
				if noLeaderSince.IsZero() {
					noLeaderSince = now
				} else if now.Sub(noLeaderSince) >= grace {
					return dkverr.New(dkverr.Unavailable, "node %s has had no leader for %v", o.MemberName, now.Sub(noLeaderSince).Round(time.Millisecond))
				}
			} else {
				noLeaderSince = time.Time{}
			}
		}
	}
}

// create validates and registers one watch. It returns a response to send
// directly when the watch could not be created (created and canceled).
func (ws *watchService) create(ctx context.Context, st *watch.Stream, req *dkvpb.WatchCreateRequest) *dkvpb.WatchResponse {
	n, o := ws.a.n, ws.a.o
	refuse := func(err error) *dkvpb.WatchResponse {
		r := &dkvpb.WatchResponse{
			Header: n.Header(0), WatchId: req.GetWatchId(), Created: true, Canceled: true,
			CancelStatus: dkverr.CodeOf(err).Reason(), CancelReason: dkverr.Message(err),
		}
		var de *dkverr.Error
		if errors.As(err, &de) && de.Metadata["compact_revision"] != "" {
			r.CompactRevision, _ = strconv.ParseInt(de.Metadata["compact_revision"], 10, 64)
		}
		return r
	}
	store, err := n.StoreOf(ctx)
	if err != nil {
		return refuse(err)
	}
	var query *mvcc.Query
	if req.GetQuery() != "" {
		// A watch by query is a prefix watch of the query's prefix, with
		// prev_kv, whose events the hub filters and marks.
		if len(req.Key) > 0 || len(req.RangeEnd) > 0 || req.Prefix {
			return refuse(dkverr.New(dkverr.InvalidInput, "a watch by query takes no key, range_end or prefix (the query's prefix= sets its keys)"))
		}
		q, err := mvcc.ParseQuery(req.GetQuery())
		if err != nil {
			return refuse(err)
		}
		query = q
		req = proto.Clone(req).(*dkvpb.WatchCreateRequest)
		req.Key, req.Prefix, req.PrevKv = q.Prefix, true, true
	}
	if _, err := store.Request(req); err != nil {
		return refuse(err)
	}
	if query != nil {
		// The hub matches the physical keys of events.
		if query.Prefix, err = store.KeyPrefix(query.Prefix); err != nil {
			return refuse(err)
		}
	}
	if err := mvcc.ValidateRange(&dkvpb.RangeRequest{Key: req.Key, RangeEnd: req.RangeEnd, Prefix: req.Prefix}, o.Limits); err != nil {
		return refuse(err)
	}
	// A watch is allowed only if the caller may read its whole range.
	if _, err := n.Authorize(ctx, dkvpb.Watch_Watch_FullMethodName, &dkvpb.RangeRequest{Key: req.Key, RangeEnd: req.RangeEnd, Prefix: req.Prefix}); err != nil {
		return refuse(err)
	}
	switch {
	case req.StartRevision < 0:
		return refuse(dkverr.New(dkverr.InvalidInput, "start_revision is %d; it must not be negative", req.StartRevision))
	case req.Fragment < 0:
		return refuse(dkverr.New(dkverr.InvalidInput, "fragment is %d; it must not be negative", req.Fragment))
	case req.ProgressIntervalMs < 0:
		return refuse(dkverr.New(dkverr.InvalidInput, "progress_interval_ms is %d; it must not be negative", req.ProgressIntervalMs))
	case req.WatchId < 0:
		return refuse(dkverr.New(dkverr.InvalidInput, "watch_id is %d; it must not be negative", req.WatchId))
	}
	if !n.HasLeader() {
		return refuse(dkverr.New(dkverr.Unavailable, "node %s has no leader", o.MemberName))
	}
	spec := watch.Spec{
		ID: req.WatchId, Key: req.Key, RangeEnd: req.RangeEnd, Prefix: req.Prefix,
		PrevKV: req.PrevKv, FilterPuts: req.FilterPuts, FilterDeletes: req.FilterDeletes,
		ProgressNotify: req.ProgressNotify, ProgressInterval: time.Duration(req.ProgressIntervalMs) * time.Millisecond,
		Fragment: int(req.Fragment), Query: query,
	}
	applied := n.Applied()
	var (
		start int64
		cur   int64 // the store's revision when the watch was created
		snap  []*dkvpb.KeyValue
	)
	if req.IncludeInitialSnapshot || req.StartRevision == 0 {
		// "Now" must be linearizable: a watch created after a write was
		// acknowledged must not start before it, even on a lagging node.
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := n.WaitLinearizable(wctx)
		cancel()
		if err != nil {
			return refuse(dkverr.New(dkverr.Unavailable, "waiting for a linearizable read: %v", err))
		}
		if err := n.Recheck(ctx, &dkvpb.RangeRequest{Key: req.Key, RangeEnd: req.RangeEnd, Prefix: req.Prefix}); err != nil {
			return refuse(err)
		}
	}
	switch {
	case req.IncludeInitialSnapshot:
		ps := applied.Snapshot()
		resp, err := ps.Range(&dkvpb.RangeRequest{Key: req.Key, RangeEnd: req.RangeEnd, Prefix: req.Prefix})
		ps.Close()
		if err != nil {
			return refuse(err)
		}
		start = resp.GetHeader().GetRevision() + 1
		cur = start - 1
		snap = resp.Kvs
		if query != nil {
			snap = snap[:0:0]
			for _, kv := range resp.Kvs {
				if query.Matches(kv.Key, kv.Labels) {
					snap = append(snap, kv)
				}
			}
		}
	case req.StartRevision == 0:
		rev, _, err := applied.Latest().Counters()
		if err != nil {
			return refuse(dkverr.New(dkverr.Internal, "%v", err))
		}
		start, cur = rev+1, rev
	default:
		start = req.StartRevision
		rev, comp, err := applied.Latest().Counters()
		if err != nil {
			return refuse(dkverr.New(dkverr.Internal, "%v", err))
		}
		cur = rev
		// Like etcd, the compact revision itself can still be watched, as
		// it can be read: its change log and versions are kept. Only its
		// prev_kv, the versions before it, may be gone.
		switch {
		case start < comp:
			return refuse(mvcc.CompactedError(start, comp))
		case start == comp && req.PrevKv:
			return refuse(watch.CompactedPrevKVError(start, comp))
		}
	}
	pre := func(id int64) []*dkvpb.WatchResponse {
		out := []*dkvpb.WatchResponse{{Header: n.Header(0), WatchId: id, Created: true}}
		// Events follow from start; a watch of a future revision reports
		// the store's revision, not one that does not exist yet.
		out[0].Header.Revision = min(start-1, cur)
		if !req.IncludeInitialSnapshot {
			return out
		}
		chunk := &dkvpb.WatchResponse{Header: n.Header(0), WatchId: id}
		chunk.Header.Revision = start - 1
		size := 0
		for _, kv := range snap {
			if len(chunk.Snapshot) >= snapshotChunkKeys || size >= snapshotChunkBytes {
				out = append(out, chunk)
				chunk = &dkvpb.WatchResponse{Header: out[0].Header, WatchId: id}
				size = 0
			}
			chunk.Snapshot = append(chunk.Snapshot, kv)
			size += len(kv.Key) + len(kv.Value) + 32
		}
		chunk.SnapshotEnd = true
		return append(out, chunk)
	}
	if _, err := st.Add(spec, start, pre); err != nil {
		if errors.Is(err, watch.ErrDuplicateID) {
			return refuse(dkverr.New(dkverr.InvalidInput, "watch id %d is already in use on this stream", req.WatchId))
		}
		return refuse(dkverr.New(dkverr.Unavailable, "%v", err))
	}
	return nil
}

// storeWatchStream strips the store's prefix from everything a watch
// stream sends.
type storeWatchStream struct {
	dkvpb.Watch_WatchServer
	m storekeys.Mapper
}

func (w storeWatchStream) Send(r *dkvpb.WatchResponse) error {
	return w.Watch_WatchServer.Send(w.m.Watch(r))
}
