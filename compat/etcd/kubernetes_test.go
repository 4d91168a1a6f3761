package etcdcompat

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The request shapes Kubernetes' API server (k8s.io/apiserver's
// storage/etcd3) sends, written here from their description: each is one
// Txn, and the apiserver relies on the failure branch's response to retry
// without another round trip.

// k8sCreate: put only if the key has never been written (mod_revision 0),
// with or without a lease; the failure branch is empty.
func k8sCreate(ctx context.Context, cli *clientv3.Client, key, val string, lease clientv3.LeaseID) (*clientv3.TxnResponse, error) {
	var opts []clientv3.OpOption
	if lease != clientv3.NoLease {
		opts = append(opts, clientv3.WithLease(lease))
	}
	return cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, val, opts...)).Commit()
}

// k8sUpdate: put if the key is still at the revision read; else return
// the current object.
func k8sUpdate(ctx context.Context, cli *clientv3.Client, key, val string, rev int64) (*clientv3.TxnResponse, error) {
	return cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpPut(key, val)).Else(clientv3.OpGet(key)).Commit()
}

// k8sDelete: delete if the key is still at the revision read; else return
// the current object.
func k8sDelete(ctx context.Context, cli *clientv3.Client, key string, rev int64) (*clientv3.TxnResponse, error) {
	return cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpDelete(key)).Else(clientv3.OpGet(key)).Commit()
}

// k8sCompact is the compactor's bookkeeping: it records the revision it
// compacts in compact_rev_key, guarded by the key's version (which each
// put increments), so only one apiserver compacts per interval; the
// winner then calls Compact. It returns the key's version after the
// call and whether this caller won.
func k8sCompact(ctx context.Context, cli *clientv3.Client, key string, version, rev int64) (int64, bool, error) {
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Version(key), "=", version)).
		Then(clientv3.OpPut(key, strconv.FormatInt(rev, 10))).
		Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return 0, false, err
	}
	if !resp.Succeeded {
		return resp.Responses[0].GetResponseRange().Kvs[0].Version, false, nil
	}
	if _, err := cli.Compact(ctx, rev); err != nil {
		return 0, false, err
	}
	return version + 1, true, nil
}

func TestKubernetesShapes(t *testing.T) {
	c := startCluster(t, target(t))
	cli := c.newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	t.Run("Create", func(t *testing.T) {
		key := "/registry/pods/default/p1"
		r, err := k8sCreate(ctx, cli, key, "v1", clientv3.NoLease)
		if err != nil || !r.Succeeded || len(r.Responses) != 1 || r.Responses[0].GetResponsePut() == nil {
			t.Fatalf("create of a new key: %+v, %v", r, err)
		}
		created := r.Responses[0].GetResponsePut().Header.Revision
		if created != r.Header.Revision {
			t.Fatalf("put's header revision %d, txn's %d", created, r.Header.Revision)
		}
		r, err = k8sCreate(ctx, cli, key, "v2", clientv3.NoLease)
		if err != nil || r.Succeeded || len(r.Responses) != 0 {
			t.Fatalf("create of an existing key: %+v, %v (want failed, no responses)", r, err)
		}
		if r.Header.Revision != created {
			t.Fatalf("a failed create moved the revision from %d to %d", created, r.Header.Revision)
		}
		g, err := cli.Get(ctx, key)
		if err != nil || string(g.Kvs[0].Value) != "v1" || g.Kvs[0].ModRevision != created || g.Kvs[0].CreateRevision != created || g.Kvs[0].Version != 1 {
			t.Fatalf("after create: %+v, %v", g, err)
		}
		// With a lease (as events are written): the key goes with it.
		lg, err := cli.Grant(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		ekey := "/registry/events/default/e1"
		if r, err := k8sCreate(ctx, cli, ekey, "ev", lg.ID); err != nil || !r.Succeeded {
			t.Fatalf("create with a lease: %+v, %v", r, err)
		}
		g, err = cli.Get(ctx, ekey)
		if err != nil || g.Kvs[0].Lease != int64(lg.ID) {
			t.Fatalf("leased create: %+v, %v", g, err)
		}
		ttl, err := cli.TimeToLive(ctx, lg.ID, clientv3.WithAttachedKeys())
		if err != nil || len(ttl.Keys) != 1 || string(ttl.Keys[0]) != ekey {
			t.Fatalf("TimeToLive keys = %v (%v), want [%s]", ttl, err, ekey)
		}
		if _, err := cli.Revoke(ctx, lg.ID); err != nil {
			t.Fatal(err)
		}
		if g, err := cli.Get(ctx, ekey); err != nil || len(g.Kvs) != 0 {
			t.Fatalf("leased key after Revoke: %+v, %v", g, err)
		}
		// A lease that does not exist fails the whole txn.
		_, err = k8sCreate(ctx, cli, "/registry/events/default/e2", "ev", lg.ID)
		if err == nil || err.Error() != rpctypes.ErrLeaseNotFound.Error() {
			t.Fatalf("create with a revoked lease: %v, want %v", err, rpctypes.ErrLeaseNotFound)
		}
	})

	t.Run("Update", func(t *testing.T) {
		key := "/registry/configmaps/default/cm"
		r, err := k8sCreate(ctx, cli, key, "v1", clientv3.NoLease)
		if err != nil || !r.Succeeded {
			t.Fatal(r, err)
		}
		rev := r.Header.Revision
		u, err := k8sUpdate(ctx, cli, key, "v2", rev)
		if err != nil || !u.Succeeded || u.Responses[0].GetResponsePut() == nil {
			t.Fatalf("update at the current revision: %+v, %v", u, err)
		}
		rev2 := u.Responses[0].GetResponsePut().Header.Revision
		// A stale update fails, and its failure branch returns the
		// current object, which the apiserver retries from.
		u, err = k8sUpdate(ctx, cli, key, "v3-stale", rev)
		if err != nil || u.Succeeded {
			t.Fatalf("stale update: %+v, %v", u, err)
		}
		kvs := u.Responses[0].GetResponseRange().Kvs
		if len(kvs) != 1 || string(kvs[0].Value) != "v2" || kvs[0].ModRevision != rev2 || kvs[0].Version != 2 || kvs[0].CreateRevision != rev {
			t.Fatalf("stale update's failure branch: %+v", kvs)
		}
		if u.Header.Revision != rev2 {
			t.Fatalf("failed update moved the revision to %d", u.Header.Revision)
		}
		u, err = k8sUpdate(ctx, cli, key, "v3", kvs[0].ModRevision)
		if err != nil || !u.Succeeded {
			t.Fatalf("retried update: %+v, %v", u, err)
		}
		// Updating a deleted key: mod_revision 0 ≠ rev, the failure branch
		// returns no kvs.
		if _, err := cli.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
		u, err = k8sUpdate(ctx, cli, key, "v4", rev2)
		if err != nil || u.Succeeded || len(u.Responses[0].GetResponseRange().Kvs) != 0 {
			t.Fatalf("update of a deleted key: %+v, %v", u, err)
		}
	})

	t.Run("Delete", func(t *testing.T) {
		key := "/registry/secrets/default/s"
		r, err := k8sCreate(ctx, cli, key, "v1", clientv3.NoLease)
		if err != nil || !r.Succeeded {
			t.Fatal(r, err)
		}
		rev := r.Header.Revision
		u, err := k8sUpdate(ctx, cli, key, "v2", rev)
		if err != nil || !u.Succeeded {
			t.Fatal(u, err)
		}
		d, err := k8sDelete(ctx, cli, key, rev)
		if err != nil || d.Succeeded {
			t.Fatalf("stale delete: %+v, %v", d, err)
		}
		kvs := d.Responses[0].GetResponseRange().Kvs
		if len(kvs) != 1 || string(kvs[0].Value) != "v2" {
			t.Fatalf("stale delete's failure branch: %+v", kvs)
		}
		d, err = k8sDelete(ctx, cli, key, kvs[0].ModRevision)
		if err != nil || !d.Succeeded {
			t.Fatalf("delete at the current revision: %+v, %v", d, err)
		}
		dr := d.Responses[0].GetResponseDeleteRange()
		if dr == nil || dr.Deleted != 1 || dr.Header == nil || dr.Header.Revision != d.Header.Revision {
			t.Fatalf("delete response: %+v", d.Responses[0])
		}
		if g, err := cli.Get(ctx, key); err != nil || len(g.Kvs) != 0 {
			t.Fatalf("after delete: %+v, %v", g, err)
		}
	})

	t.Run("ListWithContinuation", func(t *testing.T) {
		pfx := "/registry/nodes/"
		const n = 11
		for i := range n {
			if _, err := cli.Put(ctx, fmt.Sprintf("%snode-%02d", pfx, i), strconv.Itoa(i)); err != nil {
				t.Fatal(err)
			}
		}
		// A key just outside the range: prefix "/registry/nodes/" ends
		// before "/registry/nodes0".
		if _, err := cli.Put(ctx, "/registry/nodes0", "outside"); err != nil {
			t.Fatal(err)
		}
		end := clientv3.GetPrefixRangeEnd(pfx)
		const limit = 4
		first, err := cli.Get(ctx, pfx, clientv3.WithRange(end), clientv3.WithLimit(limit))
		if err != nil {
			t.Fatal(err)
		}
		if len(first.Kvs) != limit || !first.More || first.Count != n {
			t.Fatalf("first page: %d kvs, more=%v, count=%d; want %d, true, %d", len(first.Kvs), first.More, first.Count, limit, n)
		}
		listRev := first.Header.Revision
		// Writes after the first page are not seen by the next pages,
		// which are pinned to the first page's revision.
		if _, err := cli.Put(ctx, pfx+"node-00a", "late"); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Delete(ctx, pfx+"node-10"); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(ctx, pfx+"node-05", "changed"); err != nil {
			t.Fatal(err)
		}
		var got []string
		page := first
		pages := 1
		for {
			for _, kv := range page.Kvs {
				got = append(got, string(kv.Key)+"="+string(kv.Value))
			}
			if !page.More {
				break
			}
			next := string(page.Kvs[len(page.Kvs)-1].Key) + "\x00"
			page, err = cli.Get(ctx, next, clientv3.WithRange(end), clientv3.WithLimit(limit), clientv3.WithRev(listRev))
			if err != nil {
				t.Fatal(err)
			}
			if page.Header.Revision <= listRev {
				t.Fatalf("a pinned page's header revision %d is not the current one (> %d)", page.Header.Revision, listRev)
			}
			pages++
		}
		var want []string
		for i := range n {
			want = append(want, fmt.Sprintf("%snode-%02d=%d", pfx, i, i))
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("paged list at revision %d:\n got %v\nwant %v", listRev, got, want)
		}
		if pages != 3 {
			t.Fatalf("%d pages of %d for %d keys", pages, limit, n)
		}
		// Count-only, as the apiserver's Count uses.
		cnt, err := cli.Get(ctx, pfx, clientv3.WithRange(end), clientv3.WithCountOnly())
		if err != nil || cnt.Count != n || len(cnt.Kvs) != 0 {
			t.Fatalf("count: %+v, %v", cnt, err)
		}
	})

	t.Run("WatchFromRevision", func(t *testing.T) {
		// The apiserver's watch: a prefix, from the revision after a
		// list, with prev_kv and progress notifications.
		pfx := "/registry/leases/"
		p, err := cli.Put(ctx, pfx+"a", "1")
		if err != nil {
			t.Fatal(err)
		}
		from := p.Header.Revision + 1
		if _, err := cli.Put(ctx, pfx+"a", "2"); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Delete(ctx, pfx+"a"); err != nil {
			t.Fatal(err)
		}
		wctx, wcancel := context.WithCancel(ctx)
		defer wcancel()
		wc := cli.Watch(wctx, pfx, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithPrevKV(), clientv3.WithProgressNotify(), clientv3.WithCreatedNotify())
		var evs []*clientv3.Event
		deadline := time.After(20 * time.Second)
		for len(evs) < 2 {
			select {
			case wr, ok := <-wc:
				if !ok || wr.Err() != nil {
					t.Fatalf("watch ended: %v", wr.Err())
				}
				evs = append(evs, wr.Events...)
			case <-deadline:
				t.Fatalf("watch from %d delivered %d events", from, len(evs))
			}
		}
		if evs[0].Type != mvccpb.PUT || string(evs[0].Kv.Value) != "2" || evs[0].PrevKv == nil || string(evs[0].PrevKv.Value) != "1" {
			t.Fatalf("first event %+v", evs[0])
		}
		if evs[1].Type != mvccpb.DELETE || evs[1].PrevKv == nil || string(evs[1].PrevKv.Value) != "2" || evs[1].Kv.ModRevision != from+1 {
			t.Fatalf("second event %+v", evs[1])
		}
		// RequestProgress answers with a progress notification carrying
		// the current revision.
		if err := cli.RequestProgress(wctx); err != nil {
			t.Fatal(err)
		}
		for {
			select {
			case wr := <-wc:
				if wr.IsProgressNotify() {
					if wr.Header.Revision < from+1 {
						t.Fatalf("progress at revision %d, before the events seen (%d)", wr.Header.Revision, from+1)
					}
					return
				}
				if len(wr.Events) > 0 {
					t.Fatalf("unexpected events %v", wr.Events)
				}
			case <-deadline:
				t.Fatal("no progress notification after RequestProgress")
			}
		}
	})

	t.Run("CompactBookkeeping", func(t *testing.T) {
		key := "compact_rev_key"
		p, err := cli.Put(ctx, "/registry/compact-me", "x")
		if err != nil {
			t.Fatal(err)
		}
		rev := p.Header.Revision
		// Two apiservers both think the version is 0: one wins and
		// compacts, the other learns the version from the failure branch.
		v, won, err := k8sCompact(ctx, cli, key, 0, rev)
		if err != nil || !won || v != 1 {
			t.Fatalf("first compactor: version %d, won %v, %v", v, won, err)
		}
		v, won, err = k8sCompact(ctx, cli, key, 0, rev)
		if err != nil || won || v != 1 {
			t.Fatalf("second compactor: version %d, won %v, %v (want the current version 1 and not won)", v, won, err)
		}
		g, err := cli.Get(ctx, key)
		if err != nil || string(g.Kvs[0].Value) != strconv.FormatInt(rev, 10) {
			t.Fatalf("compact_rev_key = %+v, %v", g, err)
		}
		// The compaction happened: a read below it is refused as etcd
		// refuses it.
		_, err = cli.Get(ctx, "/registry/compact-me", clientv3.WithRev(rev-1))
		if err == nil || err.Error() != rpctypes.ErrCompacted.Error() {
			t.Fatalf("read below the compacted revision: %v, want %v", err, rpctypes.ErrCompacted)
		}
		// The next interval, with the version learned.
		p, err = cli.Put(ctx, "/registry/compact-me", "y")
		if err != nil {
			t.Fatal(err)
		}
		v, won, err = k8sCompact(ctx, cli, key, v, p.Header.Revision)
		if err != nil || !won || v != 2 {
			t.Fatalf("next interval: version %d, won %v, %v", v, won, err)
		}
		// Compacting to the same revision again is refused.
		if _, err := cli.Compact(ctx, p.Header.Revision); err == nil || err.Error() != rpctypes.ErrCompacted.Error() {
			t.Fatalf("compact again at the same revision: %v, want %v", err, rpctypes.ErrCompacted)
		}
	})
}
