package etcdapi_test

import (
	"fmt"
	"strings"
	"testing"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
)

// watchLines is a watch response as lines: one for a control response
// (created, canceled, progress) with its header revision, one per event
// (type key=value@mod, [prev value]). It checks that every event's
// revision is at most the header's and that events are in order.
func watchLines(t *testing.T, r *etcdserverpb.WatchResponse, last *int64) []string {
	t.Helper()
	switch {
	case r.Created && r.Canceled:
		return []string{fmt.Sprintf("created+canceled rev=%d %s", r.Header.GetRevision(), r.CancelReason)}
	case r.Created:
		return []string{fmt.Sprintf("created rev=%d", r.Header.GetRevision())}
	case r.Canceled:
		return []string{fmt.Sprintf("canceled compact=%d rev=%d", r.CompactRevision, r.Header.GetRevision())}
	case len(r.Events) == 0:
		return []string{fmt.Sprintf("progress rev=%d", r.Header.GetRevision())}
	}
	var b []string
	for _, e := range r.Events {
		if e.Kv.ModRevision < *last || e.Kv.ModRevision > r.Header.GetRevision() {
			t.Fatalf("event at revision %d after %d, in a response at %d", e.Kv.ModRevision, *last, r.Header.GetRevision())
		}
		*last = e.Kv.ModRevision
		s := fmt.Sprintf("%s %s=%s@%d", e.Type, e.Kv.Key, e.Kv.Value, e.Kv.ModRevision)
		if e.PrevKv != nil {
			s += fmt.Sprintf("[%s]", e.PrevKv.Value)
		}
		b = append(b, s)
	}
	return b
}

func createReq(c *etcdserverpb.WatchCreateRequest) *etcdserverpb.WatchRequest {
	return &etcdserverpb.WatchRequest{RequestUnion: &etcdserverpb.WatchRequest_CreateRequest{CreateRequest: c}}
}

func TestWatch(t *testing.T) {
	for _, tc := range []struct {
		name   string
		create *etcdserverpb.WatchCreateRequest
		// then runs after the created response has been read.
		then func(t *testing.T, n *node)
		want []string
	}{
		{
			name:   "from a past revision, one response per revision, prev_kv",
			create: &etcdserverpb.WatchCreateRequest{Key: []byte("a"), RangeEnd: []byte("z"), StartRevision: 3, PrevKv: true, WatchId: 7},
			then: func(t *testing.T, n *node) {
				if _, err := n.kv.Txn(ctxT(t), &etcdserverpb.TxnRequest{Success: []*etcdserverpb.RequestOp{putOp("e", "5"), delOp("b")}}); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{
				"created rev=2",
				"PUT b=2@3", "PUT c=3@4", "PUT a=11@5[1]", "PUT d=4@6",
				"PUT e=5@7", "DELETE b=@7[2]",
			},
		},
		{
			name:   "filters NOPUT",
			create: &etcdserverpb.WatchCreateRequest{Key: []byte{0}, RangeEnd: []byte{0}, StartRevision: 1, Filters: []etcdserverpb.WatchCreateRequest_FilterType{etcdserverpb.WatchCreateRequest_NOPUT}},
			then: func(t *testing.T, n *node) {
				if _, err := n.kv.DeleteRange(ctxT(t), &etcdserverpb.DeleteRangeRequest{Key: []byte("c")}); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{"created rev=0", "DELETE c=@7"},
		},
		{
			// etcd's cancel carries no revision in its header (etcdctl
			// watch -w json prints that header).
			name:   "compacted start revision: created, then canceled with compact_revision",
			create: &etcdserverpb.WatchCreateRequest{Key: []byte("a"), StartRevision: 3},
			want:   []string{"created rev=6", "canceled compact=4 rev=0"},
		},
		{
			name:   "future start revision waits for it",
			create: &etcdserverpb.WatchCreateRequest{Key: []byte("f"), StartRevision: 8},
			then: func(t *testing.T, n *node) {
				for _, v := range []string{"6", "7"} {
					if _, err := n.kv.Put(ctxT(t), &etcdserverpb.PutRequest{Key: []byte("f"), Value: []byte(v)}); err != nil {
						t.Fatal(err)
					}
				}
			},
			want: []string{"created rev=6", "PUT f=7@8"},
		},
		{
			name:   "now, then writes through DKV's own API",
			create: &etcdserverpb.WatchCreateRequest{Key: []byte("jobs/"), RangeEnd: []byte("jobs0")},
			then: func(t *testing.T, n *node) {
				if _, err := n.dkv.Put(ctxT(t), &dkvpb.PutRequest{Key: []byte("jobs/1"), Value: []byte("x")}); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{"created rev=6", "PUT jobs/1=x@7"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := startNode(t)
			seed(t, n)
			ctx := ctxT(t)
			if strings.HasPrefix(tc.name, "compacted") {
				if _, err := n.kv.Compact(ctx, &etcdserverpb.CompactionRequest{Revision: 4}); err != nil {
					t.Fatal(err)
				}
			}
			ws, err := n.w.Watch(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := ws.Send(createReq(tc.create)); err != nil {
				t.Fatal(err)
			}
			var (
				got  []string
				last int64
				id   int64 = -1
			)
			for len(got) < len(tc.want) {
				r, err := ws.Recv()
				if err != nil {
					t.Fatalf("after %q: %v", got, err)
				}
				if id == -1 {
					id = r.WatchId
					if tc.create.WatchId != 0 && id != tc.create.WatchId {
						t.Fatalf("watch id %d, want the client's %d", id, tc.create.WatchId)
					}
				} else if r.WatchId != id {
					t.Fatalf("response for watch %d, want %d", r.WatchId, id)
				}
				got = append(got, watchLines(t, r, &last)...)
				if len(got) == 1 && tc.then != nil {
					tc.then(t, n)
				}
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// TestWatchProgressCancel: RequestProgress answers with the store's
// revision and no events; a cancel answers canceled.
func TestWatchProgressCancel(t *testing.T) {
	n := startNode(t)
	seed(t, n)
	ctx := ctxT(t)
	ws, err := n.w.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ws.Send(createReq(&etcdserverpb.WatchCreateRequest{Key: []byte("a")})); err != nil {
		t.Fatal(err)
	}
	r, err := ws.Recv()
	if err != nil || !r.Created {
		t.Fatalf("create: %v %v", r, err)
	}
	id := r.WatchId
	if err := ws.Send(&etcdserverpb.WatchRequest{RequestUnion: &etcdserverpb.WatchRequest_ProgressRequest{ProgressRequest: &etcdserverpb.WatchProgressRequest{}}}); err != nil {
		t.Fatal(err)
	}
	r, err = ws.Recv()
	var last int64
	if err != nil || r.WatchId != id || strings.Join(watchLines(t, r, &last), "") != "progress rev=6" {
		t.Fatalf("progress: %v %v", r, err)
	}
	if err := ws.Send(&etcdserverpb.WatchRequest{RequestUnion: &etcdserverpb.WatchRequest_CancelRequest{CancelRequest: &etcdserverpb.WatchCancelRequest{WatchId: id}}}); err != nil {
		t.Fatal(err)
	}
	r, err = ws.Recv()
	if err != nil || !r.Canceled || r.WatchId != id {
		t.Fatalf("cancel: %v %v", r, err)
	}
}

// TestOneKeyspace: a key written through DKV's API reads identically
// (revision, version, lease) through etcd's, and a DKV watch sees a
// write made through etcd's API.
func TestOneKeyspace(t *testing.T) {
	n := startNode(t)
	ctx := ctxT(t)
	g, err := dkvpb.NewLeaseClient(n.conn).Grant(ctx, &dkvpb.LeaseGrantRequest{TtlMs: 60000})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"1", "2"} {
		if _, err := n.dkv.Put(ctx, &dkvpb.PutRequest{Key: []byte("k"), Value: []byte(v), Lease: g.Id}); err != nil {
			t.Fatal(err)
		}
	}
	d, err := n.dkv.Range(ctx, &dkvpb.RangeRequest{Key: []byte("k")})
	if err != nil {
		t.Fatal(err)
	}
	e, err := n.kv.Range(ctx, &etcdserverpb.RangeRequest{Key: []byte("k")})
	if err != nil {
		t.Fatal(err)
	}
	dk, ek := d.Kvs[0], e.Kvs[0]
	if string(dk.Key) != string(ek.Key) || string(dk.Value) != string(ek.Value) || dk.CreateRevision != ek.CreateRevision ||
		dk.ModRevision != ek.ModRevision || dk.Version != ek.Version || dk.Lease != ek.Lease || ek.Lease != g.Id || ek.Version != 2 ||
		d.Header.Revision != e.Header.Revision || d.Header.ClusterId != e.Header.ClusterId || d.Header.MemberId != e.Header.MemberId {
		t.Fatalf("dkv %v\netcd %v", d, e)
	}
	ls, err := n.l.LeaseLeases(ctx, &etcdserverpb.LeaseLeasesRequest{})
	if err != nil || len(ls.Leases) != 1 || ls.Leases[0].ID != g.Id {
		t.Fatalf("etcd Leases of a DKV lease: %v %v", ls, err)
	}

	dw, err := dkvpb.NewWatchClient(n.conn).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := dw.Send(&dkvpb.WatchRequest{RequestUnion: &dkvpb.WatchRequest_CreateRequest{CreateRequest: &dkvpb.WatchCreateRequest{Key: []byte("k")}}}); err != nil {
		t.Fatal(err)
	}
	if r, err := dw.Recv(); err != nil || !r.Created {
		t.Fatalf("dkv watch: %v %v", r, err)
	}
	p, err := n.kv.Put(ctx, &etcdserverpb.PutRequest{Key: []byte("k"), Value: []byte("3"), IgnoreLease: true})
	if err != nil {
		t.Fatal(err)
	}
	r, err := dw.Recv()
	if err != nil || len(r.Events) != 1 || string(r.Events[0].Kv.Value) != "3" || r.Events[0].Kv.ModRevision != p.Header.Revision || r.Events[0].Kv.Lease != g.Id {
		t.Fatalf("dkv watch of an etcd put: %v %v", r, err)
	}
}
