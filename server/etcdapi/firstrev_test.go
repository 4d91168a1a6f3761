package etcdapi_test

import (
	"testing"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
)

// A fresh node is at revision 1, as a fresh etcd is. clientv3's
// Election.Campaign puts its key and then waits for the keys created
// before it: a Range with max_create_revision = the put's revision - 1.
// With the first write at revision 1 that bound was 0, which etcd reads
// as "no bound", so the first candidate of a fresh cluster found its own
// key and waited on itself (etcdctl elect hung).
func TestFirstCampaignDoesNotWaitOnItself(t *testing.T) {
	n := startNode(t)
	ctx := ctxT(t)
	st, err := etcdserverpb.NewMaintenanceClient(n.conn).Status(ctx, &etcdserverpb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Header.Revision != 1 {
		t.Errorf("fresh node Status: revision %d, want 1", st.Header.Revision)
	}
	lease, err := n.l.LeaseGrant(ctx, &etcdserverpb.LeaseGrantRequest{TTL: 60})
	if err != nil {
		t.Fatal(err)
	}
	key := []byte("e1/first")
	// Campaign's txn: create the key if it does not exist, else read it.
	txn, err := n.kv.Txn(ctx, &etcdserverpb.TxnRequest{
		Compare: []*etcdserverpb.Compare{{Key: key, Target: etcdserverpb.Compare_CREATE, Result: etcdserverpb.Compare_EQUAL,
			TargetUnion: &etcdserverpb.Compare_CreateRevision{CreateRevision: 0}}},
		Success: []*etcdserverpb.RequestOp{{Request: &etcdserverpb.RequestOp_RequestPut{RequestPut: &etcdserverpb.PutRequest{Key: key, Value: []byte("v1"), Lease: lease.ID}}}},
		Failure: []*etcdserverpb.RequestOp{{Request: &etcdserverpb.RequestOp_RequestRange{RequestRange: &etcdserverpb.RangeRequest{Key: key}}}},
	})
	if err != nil || !txn.Succeeded {
		t.Fatalf("campaign txn: %v %v", txn, err)
	}
	rev := txn.Header.Revision
	if rev != 2 {
		t.Errorf("first write at revision %d, want 2 (as etcd's)", rev)
	}
	// waitDeletes: the newest key under the prefix created before ours.
	ahead, err := n.kv.Range(ctx, &etcdserverpb.RangeRequest{Key: []byte("e1/"), RangeEnd: []byte("e10"), Limit: 1,
		SortOrder: etcdserverpb.RangeRequest_DESCEND, SortTarget: etcdserverpb.RangeRequest_CREATE, MaxCreateRevision: rev - 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(ahead.Kvs) != 0 {
		t.Fatalf("keys ahead of the first candidate: %s (it would wait on itself)", show(ahead.Kvs))
	}
}

// DKV's own API shares the revision: a fresh node's first write through
// it is revision 2 too, and a watch from revision 1 sees it.
func TestFirstDKVWriteIsRevisionTwo(t *testing.T) {
	n := startNode(t)
	ctx := ctxT(t)
	if r, err := n.kv.Range(ctx, &etcdserverpb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}}); err != nil || r.Header.Revision != 1 || len(r.Kvs) != 0 {
		t.Fatalf("fresh node: %v %v, want revision 1 and no keys", r, err)
	}
	p, err := n.dkv.Put(ctx, &dkvpb.PutRequest{Key: []byte("a"), Value: []byte("1")})
	if err != nil || p.Header.Revision != 2 {
		t.Fatalf("first DKV put: %v %v, want revision 2", p, err)
	}
	r, err := n.kv.Range(ctx, &etcdserverpb.RangeRequest{Key: []byte("a")})
	if err != nil || show(r.Kvs) != "a=1@2/2/1" || r.Header.Revision != 2 {
		t.Fatalf("through etcd's API: %v %v", r, err)
	}
	ws, err := n.w.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ws.Send(&etcdserverpb.WatchRequest{RequestUnion: &etcdserverpb.WatchRequest_CreateRequest{
		CreateRequest: &etcdserverpb.WatchCreateRequest{Key: []byte("a"), StartRevision: 1}}}); err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := ws.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.Created || len(resp.Events) == 0 {
			continue
		}
		if len(resp.Events) != 1 || resp.Events[0].Kv.ModRevision != 2 {
			t.Fatalf("watch from revision 1: %v", resp.Events)
		}
		return
	}
}
