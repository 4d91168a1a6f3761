package proxy_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/testutil"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// etcdConn is a raw gRPC connection, as an etcd client makes, to addr.
func etcdConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// ewStream is one etcd Watch stream, read in the background: created
// responses in order on created, everything else by watch id.
type ewStream struct {
	st      etcdserverpb.Watch_WatchClient
	created chan *etcdserverpb.WatchResponse
	done    chan struct{} // closed when Recv fails, with err set
	err     error

	mu   sync.Mutex
	byID map[int64]chan *etcdserverpb.WatchResponse
}

// openEtcdWatch opens an etcd Watch stream on conn, with token as etcd's
// clients send it ("" for none).
func openEtcdWatch(t *testing.T, ctx context.Context, conn *grpc.ClientConn, token string) *ewStream {
	t.Helper()
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, rpctypes.TokenFieldNameGRPC, token)
	}
	st, err := etcdserverpb.NewWatchClient(conn).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := &ewStream{st: st, created: make(chan *etcdserverpb.WatchResponse, 1000), done: make(chan struct{}), byID: map[int64]chan *etcdserverpb.WatchResponse{}}
	go func() {
		defer close(s.done)
		for {
			r, err := st.Recv()
			if err != nil {
				s.err = err
				return
			}
			if r.Created {
				s.created <- r
				continue
			}
			s.ch(r.WatchId) <- r
		}
	}()
	return s
}

func (s *ewStream) ch(id int64) chan *etcdserverpb.WatchResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.byID[id]
	if c == nil {
		c = make(chan *etcdserverpb.WatchResponse, 10000)
		s.byID[id] = c
	}
	return c
}

// create sends req and returns the created response that answers it.
func (s *ewStream) create(t *testing.T, req *etcdserverpb.WatchCreateRequest) *etcdserverpb.WatchResponse {
	t.Helper()
	if err := s.st.Send(&etcdserverpb.WatchRequest{RequestUnion: &etcdserverpb.WatchRequest_CreateRequest{CreateRequest: req}}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-s.created:
		return r
	case <-s.done:
		t.Fatalf("stream ended before the watch of %q was created: %v", req.Key, s.err)
	case <-time.After(waitLong):
		t.Fatalf("no created response for the watch of %q", req.Key)
	}
	return nil
}

// next is the next response of watch id, other than a creation.
func (s *ewStream) next(id int64) (*etcdserverpb.WatchResponse, error) {
	select {
	case r := <-s.ch(id):
		return r, nil
	case <-s.done:
		select {
		case r := <-s.ch(id):
			return r, nil
		default:
		}
		return nil, fmt.Errorf("stream ended: %v", s.err)
	case <-time.After(waitLong):
		return nil, fmt.Errorf("watch %d: no response", id)
	}
}

// expect reads watch id until it has delivered the values from..to-1 as
// written by putSeq, failing on any gap, duplicate or reordering, and on
// revisions that go backwards.
func (s *ewStream) expect(id int64, from, to int) error {
	next, lastRev := from, int64(0)
	for next < to {
		r, err := s.next(id)
		if err != nil {
			return fmt.Errorf("watch %d at %d: %v", id, next, err)
		}
		if r.Canceled {
			return fmt.Errorf("watch %d canceled at %d: %v", id, next, r)
		}
		for _, ev := range r.Events {
			got, err := strconv.Atoi(string(ev.Kv.Value))
			if err != nil || got != next || ev.Kv.ModRevision <= lastRev {
				return fmt.Errorf("watch %d: event %q at revision %d (after %d), want %d", id, ev.Kv.Value, ev.Kv.ModRevision, lastRev, next)
			}
			lastRev = ev.Kv.ModRevision
			next++
		}
	}
	return nil
}

type etcdWatcher struct {
	s  *ewStream
	id int64
}

func expectEtcdAll(t *testing.T, ws []etcdWatcher, from, to int) {
	t.Helper()
	errs := make(chan error, len(ws))
	for _, w := range ws {
		go func() { errs <- w.s.expect(w.id, from, to) }()
	}
	var failed []string
	for range ws {
		if err := <-errs; err != nil {
			failed = append(failed, err.Error())
		}
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d watchers: %s", len(failed), len(ws), strings.Join(failed, "; "))
	}
}

func prefixEnd(p string) []byte {
	b := []byte(p)
	b[len(b)-1]++
	return b
}

// TestEtcdWatchCoalesced: etcd-API watches of one prefix, on several
// streams over several connections, some with ids the client chose, and
// DKV-API watches of the same range (one naming it as etcd does, one of
// DKV's client naming the prefix), share one upstream watch; every
// one of them gets every event in order, also across the failure of
// the member that upstream watch is on; cancels end them one by one and
// the last takes the upstream watch with it.
func TestEtcdWatchCoalesced(t *testing.T) {
	c := servertest.NewCluster(t, 3, server.Config{})
	// A member that knows no leader refuses watches, as etcd does.
	c.WaitLeader()
	c.Eventually(waitLong, "every member knows the leader", func() bool {
		for _, nd := range c.Nodes {
			if nd.Srv.LeaderID() == 0 {
				return false
			}
		}
		return true
	})
	p := startProxy(t, "", c.Nodes...)
	base := clusterWatchers(c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var ws []etcdWatcher
	for i := range 4 {
		conn := etcdConn(t, p.Addr())
		for range 2 {
			s := openEtcdWatch(t, ctx, conn, "")
			for j := range 5 {
				req := &etcdserverpb.WatchCreateRequest{Key: []byte("cfg/"), RangeEnd: prefixEnd("cfg/")}
				if i%2 == 1 {
					req.WatchId = int64(100 + j) // chosen by the client
				}
				r := s.create(t, req)
				if r.Canceled || (req.WatchId != 0 && r.WatchId != req.WatchId) {
					t.Fatalf("create: %v", r)
				}
				ws = append(ws, etcdWatcher{s, r.WatchId})
			}
		}
	}
	// A DKV-API watch of the same range, with the same (no) metadata.
	dst, err := dkvpb.NewWatchClient(etcdConn(t, p.Addr())).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := dst.Send(&dkvpb.WatchRequest{RequestUnion: &dkvpb.WatchRequest_CreateRequest{CreateRequest: &dkvpb.WatchCreateRequest{Key: []byte("cfg/"), RangeEnd: prefixEnd("cfg/")}}}); err != nil {
		t.Fatal(err)
	}
	if r, err := dst.Recv(); err != nil || !r.Created {
		t.Fatalf("DKV watch: %v %v", r, err)
	}
	// And one of DKV's client, which names the prefix as a prefix.
	dw, err := dial(t, p, "", "").WatchPrefix(ctx, "cfg/")
	if err != nil {
		t.Fatal(err)
	}
	if got := p.LocalWatchers(); got != 42 {
		t.Fatalf("proxy holds %d local watchers, want 42 (40 etcd-API, 2 DKV-API)", got)
	}
	if got := p.UpstreamWatches(); got != 1 {
		t.Fatalf("proxy holds %d upstream watches for 42 watchers of one range, want 1", got)
	}
	if got := clusterWatchers(c) - base; got != 1 {
		t.Fatalf("the cluster holds %d watches for the proxy, want 1", got)
	}

	writer := servertest.Client(t, c.Nodes...)
	putSeq(t, writer, "cfg/seq", 0, 30)
	expectEtcdAll(t, ws, 0, 30)
	if err := expect(dw, 0, 30); err != nil {
		t.Fatalf("DKV client's watch: %v", err)
	}
	for next := 0; next < 30; {
		r, err := dst.Recv()
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range r.Events {
			if string(ev.Kv.Value) != strconv.Itoa(next) {
				t.Fatalf("DKV watch: %q, want %d", ev.Kv.Value, next)
			}
			next++
		}
	}

	// Kill the member holding the upstream watch, after making it the
	// leader: nothing is lost, nothing repeated.
	var on *servertest.Node
	for _, nd := range c.Nodes {
		if nd.Srv.WatchHub().Stats().Watchers > 0 {
			on = nd
		}
	}
	if on == nil {
		t.Fatal("no member holds the upstream watch")
	}
	tctx, tcancel := context.WithTimeout(ctx, waitLong)
	defer tcancel()
	if _, err := c.WaitLeader().Cluster.LeaderTransfer(tctx, &dkvpb.LeaderTransferRequest{Name: on.Name}); err != nil {
		t.Fatalf("leader transfer to %s: %v", on.Name, err)
	}
	testutil.Eventually(t, waitLong, on.Name+" leads", func() bool { return on.Srv.IsLeader() })
	c.Stop(on)
	var rest []*servertest.Node
	for _, nd := range c.Nodes {
		if nd.Running() {
			rest = append(rest, nd)
		}
	}
	putSeq(t, servertest.Client(t, rest...), "cfg/seq", 30, 60)
	expectEtcdAll(t, ws, 30, 60)
	if err := expect(dw, 30, 60); err != nil {
		t.Fatalf("DKV client's watch: %v", err)
	}
	if metric(t, p, "dkv_proxy_upstream_watch_resumes_total") == 0 {
		t.Error("the upstream watch never resumed: the member stopped was not the one it was on")
	}

	// Cancel: answered as a member answers it, with nothing after.
	for _, w := range ws {
		if err := w.s.st.Send(&etcdserverpb.WatchRequest{RequestUnion: &etcdserverpb.WatchRequest_CancelRequest{CancelRequest: &etcdserverpb.WatchCancelRequest{WatchId: w.id}}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range ws {
		r, err := w.s.next(w.id)
		if err != nil || !r.Canceled || r.WatchId != w.id || len(r.Events) > 0 || r.CancelReason != "" {
			t.Fatalf("cancel of watch %d: %v %v", w.id, r, err)
		}
	}
	if got := p.LocalWatchers(); got != 2 {
		t.Errorf("%d local watchers after the etcd cancels, want 2 (the DKV ones)", got)
	}
	dw.Stop()
	dst.CloseSend()
	cancel()
	testutil.Eventually(t, waitLong, "the last watch gone ends the upstream watch", func() bool {
		return p.LocalWatchers() == 0 && p.UpstreamWatches() == 0 && clusterWatchers(c) == 0
	})
}

// TestEtcdWatchOlderRevision: an etcd watch from before what the shared
// watch has delivered gets the history, then the live events, without a
// gap or a duplicate, and then rides on the shared watch; one from a
// future revision joins at once.
func TestEtcdWatchOlderRevision(t *testing.T) {
	nd := servertest.Start(t, servertest.WithClientPort())
	p := startProxy(t, "", nd)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl := servertest.Client(t, nd)
	s := openEtcdWatch(t, ctx, etcdConn(t, p.Addr()), "")
	rng := &etcdserverpb.WatchCreateRequest{Key: []byte("k/"), RangeEnd: prefixEnd("k/")}
	first := s.create(t, rng).WatchId
	putSeq(t, cl, "k/seq", 0, 10)
	if err := s.expect(first, 0, 10); err != nil {
		t.Fatal(err)
	}
	kv, err := cl.Get(ctx, "k/seq")
	if err != nil {
		t.Fatal(err)
	}
	// Value i was written at revision kv.ModRevision-9+i.
	oldReq := proto.Clone(rng).(*etcdserverpb.WatchCreateRequest)
	oldReq.StartRevision = kv.ModRevision - 4
	old := s.create(t, oldReq)
	if old.Canceled {
		t.Fatalf("a watch from revision %d: %v", oldReq.StartRevision, old)
	}
	// Live events written while it catches up come after its history.
	putErr := make(chan error, 1)
	go func() {
		var err error
		for i := 10; i < 20 && err == nil; i++ {
			_, err = cl.Put(ctx, "k/seq", []byte(strconv.Itoa(i)))
		}
		putErr <- err
	}()
	if err := s.expect(old.WatchId, 5, 20); err != nil {
		t.Fatal(err)
	}
	if err := <-putErr; err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitLong, "the catching-up watch merged into the shared one", func() bool {
		return p.UpstreamWatches() == 1
	})
	futReq := proto.Clone(rng).(*etcdserverpb.WatchCreateRequest)
	futReq.StartRevision = kv.ModRevision + 11
	fut := s.create(t, futReq).WatchId
	if got := p.UpstreamWatches(); got != 1 {
		t.Errorf("a watch from a revision to come: %d upstream watches, want 1", got)
	}
	putSeq(t, cl, "k/seq", 20, 30)
	if err := s.expect(first, 10, 30); err != nil {
		t.Fatal(err)
	}
	expectEtcdAll(t, []etcdWatcher{{s, old.WatchId}, {s, fut}}, 20, 30)
	if got := p.LocalWatchers(); got != 3 {
		t.Errorf("%d local watchers, want 3", got)
	}
}

// TestEtcdWatchCompacted: an etcd watch from a compacted revision is
// answered through the proxy as the member's etcd API answers it:
// created, then canceled with compact_revision, in etcd's headers.
func TestEtcdWatchCompacted(t *testing.T) {
	nd := servertest.Start(t, servertest.WithClientPort())
	p := startProxy(t, "", nd)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl := servertest.Client(t, nd)
	putSeq(t, cl, "c/seq", 0, 10)
	kv, err := cl.Get(ctx, "c/seq")
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Compact(ctx, kv.ModRevision); err != nil {
		t.Fatal(err)
	}
	// A live watch of the range through the proxy, so that the refused
	// one could join it if the proxy got this wrong.
	viaProxy := openEtcdWatch(t, ctx, etcdConn(t, p.Addr()), "")
	live := viaProxy.create(t, &etcdserverpb.WatchCreateRequest{Key: []byte("c/"), RangeEnd: prefixEnd("c/")})
	if got := p.UpstreamWatches(); got != 1 {
		t.Fatalf("%d upstream watches for one etcd watch, want 1", got)
	}
	direct := openEtcdWatch(t, ctx, etcdConn(t, nd.Srv.ClientAddr()), "")
	req := &etcdserverpb.WatchCreateRequest{Key: []byte("c/"), RangeEnd: prefixEnd("c/"), StartRevision: kv.ModRevision - 3}
	var got [2][2]*etcdserverpb.WatchResponse
	for i, s := range []*ewStream{direct, viaProxy} {
		got[i][0] = s.create(t, req)
		r, err := s.next(got[i][0].WatchId)
		if err != nil {
			t.Fatal(err)
		}
		got[i][1] = r
	}
	d, pr := got[0], got[1]
	if pr[0].Canceled || pr[1].CompactRevision != kv.ModRevision || !pr[1].Canceled {
		t.Fatalf("through the proxy: %v then %v, want created, then canceled with compact_revision %d", pr[0], pr[1], kv.ModRevision)
	}
	for i := range 2 {
		dh, ph := d[i].Header, pr[i].Header
		if dh.ClusterId != ph.ClusterId || dh.MemberId != ph.MemberId || dh.RaftTerm != ph.RaftTerm || dh.Revision != ph.Revision {
			t.Errorf("response %d header through the proxy %v, directly %v", i, ph, dh)
		}
		if d[i].Created != pr[i].Created || d[i].Canceled != pr[i].Canceled || d[i].CompactRevision != pr[i].CompactRevision || d[i].CancelReason != pr[i].CancelReason {
			t.Errorf("response %d through the proxy %v, directly %v", i, pr[i], d[i])
		}
	}
	testutil.Eventually(t, waitLong, "the refused watch gone, the live one kept", func() bool {
		return p.UpstreamWatches() == 1 && p.LocalWatchers() == 1
	})
	putSeq(t, cl, "c/seq", 10, 11)
	if err := viaProxy.expect(live.WatchId, 10, 11); err != nil {
		t.Fatal(err)
	}
}

// TestEtcdWatchOptions: prev_kv, the NOPUT and NODELETE filters and
// progress requests through the proxy give what the member's etcd API
// gives: the same events, headers with the member's cluster id, member
// id, raft term and revision; a progress request is answered for each
// watch at a revision no older than the last write.
func TestEtcdWatchOptions(t *testing.T) {
	nd := servertest.Start(t, servertest.WithClientPort())
	p := startProxy(t, "", nd)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	viaProxy := openEtcdWatch(t, ctx, etcdConn(t, p.Addr()), "")
	direct := openEtcdWatch(t, ctx, etcdConn(t, nd.Srv.ClientAddr()), "")
	reqs := []*etcdserverpb.WatchCreateRequest{
		{Key: []byte("o/"), RangeEnd: prefixEnd("o/"), PrevKv: true},
		{Key: []byte("o/"), RangeEnd: prefixEnd("o/"), Filters: []etcdserverpb.WatchCreateRequest_FilterType{etcdserverpb.WatchCreateRequest_NOPUT}},
		{Key: []byte("o/"), RangeEnd: prefixEnd("o/"), Filters: []etcdserverpb.WatchCreateRequest_FilterType{etcdserverpb.WatchCreateRequest_NODELETE}},
		{Key: []byte("o/a")},
		{Key: []byte{0}, RangeEnd: []byte{0}}, // every key
	}
	ids := make([][2]int64, len(reqs))
	for i, req := range reqs {
		for j, s := range []*ewStream{direct, viaProxy} {
			r := s.create(t, req)
			if r.Canceled {
				t.Fatalf("create %v: %v", req, r)
			}
			ids[i][j] = r.WatchId
		}
	}
	if got := p.UpstreamWatches(); got != int64(len(reqs)) {
		t.Fatalf("%d upstream watches for %d watches of different options, want %d", got, len(reqs), len(reqs))
	}
	cl := etcdserverpb.NewKVClient(etcdConn(t, nd.Srv.ClientAddr()))
	st, err := etcdserverpb.NewMaintenanceClient(etcdConn(t, nd.Srv.ClientAddr())).Status(ctx, &etcdserverpb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	first := st.Header
	for _, op := range []func() error{
		func() error {
			_, err := cl.Put(ctx, &etcdserverpb.PutRequest{Key: []byte("o/a"), Value: []byte("1")})
			return err
		},
		func() error {
			_, err := cl.Put(ctx, &etcdserverpb.PutRequest{Key: []byte("o/a"), Value: []byte("2")})
			return err
		},
		func() error {
			_, err := cl.Put(ctx, &etcdserverpb.PutRequest{Key: []byte("o/b"), Value: []byte("3")})
			return err
		},
		func() error {
			_, err := cl.DeleteRange(ctx, &etcdserverpb.DeleteRangeRequest{Key: []byte("o/a")})
			return err
		},
		func() error {
			_, err := cl.Put(ctx, &etcdserverpb.PutRequest{Key: []byte("zz"), Value: []byte("4")})
			return err
		},
	} {
		if err := op(); err != nil {
			t.Fatal(err)
		}
	}
	// Events of consecutive revisions may share a response, on a member
	// as through the proxy (docs/etcd-compat.md): compare the events, and
	// each response's header with the member's.
	want := []int{4, 1, 3, 3, 5} // events each watch sees
	for i := range reqs {
		var evs [2][]*mvccpb.Event
		for j, s := range []*ewStream{direct, viaProxy} {
			for len(evs[j]) < want[i] {
				r, err := s.next(ids[i][j])
				if err != nil {
					t.Fatalf("watch %v: %v", reqs[i], err)
				}
				if len(r.Events) == 0 {
					t.Fatalf("watch %v: unexpected response %v", reqs[i], r)
				}
				evs[j] = append(evs[j], r.Events...)
				h := r.Header
				if h.GetClusterId() != first.ClusterId || h.GetMemberId() != first.MemberId || h.GetRaftTerm() != first.RaftTerm || h.GetRevision() != r.Events[len(r.Events)-1].Kv.ModRevision {
					t.Errorf("watch %v (%s): header %v, want the member's ids and term %v at the revision of its last event", reqs[i], []string{"directly", "through the proxy"}[j], h, first)
				}
			}
		}
		same := len(evs[0]) == len(evs[1])
		for k := 0; same && k < len(evs[0]); k++ {
			same = proto.Equal(evs[0][k], evs[1][k])
		}
		if !same {
			t.Errorf("watch %v: through the proxy %v, directly %v", reqs[i], evs[1], evs[0])
		}
	}
	last, err := cl.Range(ctx, &etcdserverpb.RangeRequest{Key: []byte("zz")})
	if err != nil {
		t.Fatal(err)
	}
	if err := viaProxy.st.Send(&etcdserverpb.WatchRequest{RequestUnion: &etcdserverpb.WatchRequest_ProgressRequest{ProgressRequest: &etcdserverpb.WatchProgressRequest{}}}); err != nil {
		t.Fatal(err)
	}
	for i := range reqs {
		r, err := viaProxy.next(ids[i][1])
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Events) > 0 || r.Canceled || r.Header.GetRevision() < last.Header.Revision || r.Header.GetMemberId() != last.Header.MemberId || r.Header.GetClusterId() != last.Header.ClusterId {
			t.Errorf("progress of watch %v: %v, want no events at revision %d or later, the member's header", reqs[i], r, last.Header.Revision)
		}
	}
}

// TestEtcdWatchAuth: with auth on, an etcd watch through the proxy is
// checked upstream with the caller's own token. Root's watches of every
// key share one upstream watch; alice, whose role may read app/alice/
// only, cannot watch every key or app/bob/ through the proxy beside
// them (etcd's permission-denied refusal), and her own watch sees only
// her keys while root's see all. A bad token ends the stream with
// etcd's invalid-token error.
func TestEtcdWatchAuth(t *testing.T) {
	nd := servertest.Start(t, servertest.WithClientPort())
	withAlice(t, nd, nil)
	p := startProxy(t, "", nd)
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	conn := etcdConn(t, p.Addr())
	login := func(user string) string {
		r, err := etcdserverpb.NewAuthClient(conn).Authenticate(ctx, &etcdserverpb.AuthenticateRequest{Name: user, Password: "pw"})
		if err != nil {
			t.Fatalf("login %s: %v", user, err)
		}
		return r.Token
	}
	rootTok, aliceTok := login("root"), login("alice")
	all := &etcdserverpb.WatchCreateRequest{Key: []byte{0}, RangeEnd: []byte{0}}
	var rootWs []etcdWatcher
	for range 3 {
		s := openEtcdWatch(t, ctx, conn, rootTok)
		r := s.create(t, all)
		if r.Canceled {
			t.Fatalf("root watches every key: %v", r)
		}
		rootWs = append(rootWs, etcdWatcher{s, r.WatchId})
	}
	if got := p.UpstreamWatches(); got != 1 {
		t.Fatalf("%d upstream watches for root's three of every key, want 1", got)
	}
	alice := openEtcdWatch(t, ctx, conn, aliceTok)
	denied := rpctypes.ErrorDesc(rpctypes.ErrGRPCPermissionDenied)
	var refused []int64
	for _, req := range []*etcdserverpb.WatchCreateRequest{all, {Key: []byte("app/bob/"), RangeEnd: prefixEnd("app/bob/")}} {
		r := alice.create(t, req)
		if !r.Canceled || r.CancelReason != denied {
			t.Fatalf("alice watches %q..%q through the proxy beside root: %v, want canceled with %q", req.Key, req.RangeEnd, r, denied)
		}
		refused = append(refused, r.WatchId)
	}
	mine := alice.create(t, &etcdserverpb.WatchCreateRequest{Key: []byte("app/alice/"), RangeEnd: prefixEnd("app/alice/")})
	if mine.Canceled {
		t.Fatalf("alice watches app/alice/: %v", mine)
	}
	testutil.Eventually(t, waitLong, "two upstream watches, root's and alice's", func() bool { return p.UpstreamWatches() == 2 })
	kv := etcdserverpb.NewKVClient(conn)
	rctx := metadata.AppendToOutgoingContext(ctx, rpctypes.TokenFieldNameGRPC, rootTok)
	for i, k := range []string{"app/alice/a", "app/bob/b", "b/c", "app/alice/d"} {
		if _, err := kv.Put(rctx, &etcdserverpb.PutRequest{Key: []byte(k), Value: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
	}
	expectEtcdAll(t, rootWs, 0, 4)
	var got []string
	for len(got) < 2 {
		r, err := alice.next(mine.WatchId)
		if err != nil {
			t.Fatalf("alice got %v, then %v", got, err)
		}
		for _, ev := range r.Events {
			got = append(got, string(ev.Kv.Key))
		}
	}
	// A progress request flushes anything else the proxy might send her.
	if err := alice.st.Send(&etcdserverpb.WatchRequest{RequestUnion: &etcdserverpb.WatchRequest_ProgressRequest{ProgressRequest: &etcdserverpb.WatchProgressRequest{}}}); err != nil {
		t.Fatal(err)
	}
	if r, err := alice.next(mine.WatchId); err != nil || len(r.Events) > 0 {
		t.Errorf("alice's progress: %v %v, want no events", r, err)
	}
	if strings.Join(got, " ") != "app/alice/a app/alice/d" {
		t.Errorf("alice got %v, want only her two keys", got)
	}
	for _, id := range refused {
		select {
		case r := <-alice.ch(id):
			t.Errorf("alice's refused watch %d got %v", id, r)
		default:
		}
	}

	bad := openEtcdWatch(t, ctx, conn, "not-a-token")
	if err := bad.st.Send(&etcdserverpb.WatchRequest{RequestUnion: &etcdserverpb.WatchRequest_CreateRequest{CreateRequest: all}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-bad.done:
	case r := <-bad.created:
		t.Fatalf("a watch with a bad token: %v", r)
	case <-ctx.Done():
		t.Fatal("a watch with a bad token: no answer")
	}
	if want := rpctypes.ErrorDesc(rpctypes.ErrGRPCInvalidAuthToken); status.Convert(bad.err).Message() != want {
		t.Errorf("a watch with a bad token through the proxy: %v, want %q", bad.err, want)
	}
}

// TestEtcdWatchCreatedInOrder: etcd's clients match created responses to
// their create requests by order, so the proxy answers the creates of a
// stream in order even when a later one joins a shared watch at once and
// an earlier one waits for an upstream watch of its own.
func TestEtcdWatchCreatedInOrder(t *testing.T) {
	nd := servertest.Start(t, servertest.WithClientPort())
	p := startProxy(t, "", nd)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn := etcdConn(t, p.Addr())
	shared := openEtcdWatch(t, ctx, conn, "")
	shared.create(t, &etcdserverpb.WatchCreateRequest{Key: []byte("j/"), RangeEnd: prefixEnd("j/")})
	putSeq(t, servertest.Client(t, nd), "j/seq", 0, 3)

	s := openEtcdWatch(t, ctx, conn, "")
	const n = 20
	for i := range n {
		req := &etcdserverpb.WatchCreateRequest{Key: []byte("j/"), RangeEnd: prefixEnd("j/")} // joins the shared watch
		if i%2 == 0 {
			req = &etcdserverpb.WatchCreateRequest{Key: []byte("own/" + strconv.Itoa(i))} // an upstream watch of its own
		}
		if err := s.st.Send(&etcdserverpb.WatchRequest{RequestUnion: &etcdserverpb.WatchRequest_CreateRequest{CreateRequest: req}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		select {
		case r := <-s.created:
			if r.WatchId != int64(i+1) || r.Canceled {
				t.Fatalf("created response %d: %v, want watch id %d (the proxy's ids start at 1, as a member's)", i, r, i+1)
			}
		case <-time.After(waitLong):
			t.Fatalf("created response %d: none", i)
		}
	}
	if got := p.UpstreamWatches(); got != n/2+1 {
		t.Errorf("%d upstream watches, want %d", got, n/2+1)
	}
}
