package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/client"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func createStore(t *testing.T, c *client.Client, name string, maxKeys, maxBytes int64) {
	t.Helper()
	_, err := dkvpb.NewStoreClient(c.Conn()).Create(context.Background(), &dkvpb.StoreCreateRequest{Name: name, MaxKeys: maxKeys, MaxBytes: maxBytes})
	if err != nil {
		t.Fatalf("create store %s: %v", name, err)
	}
}

func keysOf(r *client.RangeResult) []string {
	var out []string
	for _, kv := range r.KVs {
		out = append(out, kv.Key+"="+string(kv.Value))
	}
	return out
}

// TestStoresAreIsolated: two stores with the
// same key names never see each other's keys, watches, locks or lease
// keys; the default store cannot reach either.
func TestStoresAreIsolated(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := startServer(t, t.TempDir())
	def := dial(t, srv.ClientAddr())
	createStore(t, def, "a", 0, 0)
	createStore(t, def, "b", 0, 0)
	a, b := def.WithStore("a"), def.WithStore("b")

	// A watch on every key of store a, opened before any write.
	w, err := a.WatchPrefix(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	for _, c := range []struct {
		cl  *client.Client
		val string
	}{{a, "in-a"}, {b, "in-b"}, {def, "in-default"}} {
		if _, err := c.cl.Put(ctx, "x", []byte(c.val)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.cl.Counter(ctx, "n", 1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Counter(ctx, "n", 10); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cl   *client.Client
		want string
	}{{a, "n=1 x=in-a"}, {b, "n=11 x=in-b"}, {def, "n=1 x=in-default"}} {
		r, err := c.cl.List(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(keysOf(r), " "); got != c.want {
			t.Errorf("store %q lists %q, want %q", c.cl.Store(), got, c.want)
		}
		kv, err := c.cl.Get(ctx, "x")
		if err != nil || kv.Key != "x" {
			t.Errorf("store %q get x: %v %v", c.cl.Store(), kv, err)
		}
	}

	// A txn in a compares and writes a's keys only; its prev_kv and
	// range replies carry a's key names.
	res, err := a.Txn(ctx).If(client.Value("x").Equal([]byte("in-a"))).
		Then(client.OpPut("x", []byte("a2"), client.WithPrevKV()), client.OpGet("x")).Commit()
	if err != nil || !res.Succeeded {
		t.Fatalf("txn in a: %v %v", res, err)
	}
	if pk := res.Responses[0].Put.PrevKV; pk == nil || pk.Key != "x" || string(pk.Value) != "in-a" {
		t.Errorf("txn prev_kv %+v", pk)
	}
	res, err = b.Txn(ctx).If(client.Value("x").Equal([]byte("a2"))).Then(client.OpPut("x", []byte("wrong"))).Commit()
	if err != nil || res.Succeeded {
		t.Errorf("txn in b saw a's value: %v %v", res, err)
	}

	// Delete everything in b: a and the default store keep their keys.
	if d, err := b.Delete(ctx, "", client.WithPrefix()); err != nil || d.Deleted != 2 {
		t.Fatalf("delete all of b: %v %v", d, err)
	}
	if kv, err := a.Get(ctx, "x"); err != nil || string(kv.Value) != "a2" {
		t.Errorf("a's x after b's delete: %v %v", kv, err)
	}
	if kv, err := def.Get(ctx, "x"); err != nil || string(kv.Value) != "in-default" {
		t.Errorf("default's x after b's delete: %v %v", kv, err)
	}

	// The watch on a saw exactly a's writes, under a's key names.
	var got []string
	deadline := time.After(10 * time.Second)
	for len(got) < 3 {
		select {
		case batch := <-w.Events():
			for _, e := range batch.Events {
				got = append(got, e.KV.Key+"="+string(e.KV.Value))
			}
		case <-deadline:
			t.Fatalf("watch on a saw %q, want 3 events", got)
		}
	}
	if want := "x=in-a n=1 x=a2"; strings.Join(got, " ") != want {
		t.Errorf("watch on a saw %q, want %q", got, want)
	}
	// A marker write in a proves nothing of b's arrived in between.
	if _, err := b.Put(ctx, "late", []byte("b")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Put(ctx, "marker", []byte("a")); err != nil {
		t.Fatal(err)
	}
	select {
	case batch := <-w.Events():
		if len(batch.Events) != 1 || batch.Events[0].KV.Key != "marker" {
			t.Errorf("watch on a saw %+v, want only the marker", batch.Events)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch on a missed the marker")
	}

	// A lock on "x" in a does not block "x" in b, and its handle names x.
	la, err := a.TryAcquire(ctx, "lk", 30*time.Second)
	if err != nil || !la.Acquired || la.Handle.Key != "lk" {
		t.Fatalf("lock lk in a: %+v %v", la, err)
	}
	lb, err := b.TryAcquire(ctx, "lk", 30*time.Second)
	if err != nil || !lb.Acquired {
		t.Fatalf("lock lk in b while a holds its lk: %+v %v", lb, err)
	}
	if _, err := a.Put(ctx, "lk", []byte("v"), client.WithLock(la.Handle)); err != nil {
		t.Errorf("fenced put in a with a's handle: %v", err)
	}
	if _, err := b.Put(ctx, "lk", []byte("v")); !errors.Is(err, client.ErrLocked) {
		t.Errorf("put to locked lk in b without handle: %v, want ErrLocked", err)
	}

	// One lease with keys in a, b and the default store: each sees its own.
	lg, err := def.Grant(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*client.Client{a, b, def} {
		if _, err := c.Put(ctx, "leased", []byte("v"), client.WithLease(lg.ID)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []*client.Client{a, b, def} {
		info, err := c.TimeToLive(ctx, lg.ID, client.WithAttachedKeys())
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(info.Keys, ",") != "leased" {
			t.Errorf("store %q sees lease keys %q, want only its own \"leased\"", c.Store(), info.Keys)
		}
	}

	// The default store cannot name the reserved range.
	if _, err := def.Put(ctx, "\xff\xff\xffdkv/stores/a/x", []byte("evil")); !errors.Is(err, client.ErrInvalidInput) {
		t.Errorf("default-store put into store a's keys: %v, want ErrInvalidInput", err)
	}
	if _, err := def.Get(ctx, "\xff\xff\xffdkv/stores/a/x"); !errors.Is(err, client.ErrInvalidInput) {
		t.Errorf("default-store get of store a's key: %v, want ErrInvalidInput", err)
	}
	r, err := def.Range(ctx, "\xff", client.WithFromKey())
	if err != nil || len(r.KVs) != 0 {
		t.Errorf("default-store range from \\xff: %v %v, want nothing", keysOf(r), err)
	}

	// An etcd client ranging over everything sees the default store only.
	conn, err := grpc.NewClient(srv.ClientAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	er, err := etcdserverpb.NewKVClient(conn).Range(ctx, &etcdserverpb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range er.Kvs {
		if strings.HasPrefix(string(kv.Key), "\xff\xff\xff") {
			t.Errorf("etcd range over everything returned a named store's key %q", kv.Key)
		}
	}
	if len(er.Kvs) != 3 { // x, n, leased
		t.Errorf("etcd range returned %d keys, want the default store's 3", len(er.Kvs))
	}

	// A store that does not exist is refused, naming the fix.
	if _, err := def.WithStore("nope").Put(ctx, "x", nil); !errors.Is(err, client.ErrNotFound) || !strings.Contains(err.Error(), "dkv store create nope") {
		t.Errorf("put in a missing store: %v", err)
	}
}

// TestStoreQuota: a store at its key quota refuses a write with a clear
// error while another store keeps writing; deleting keys frees quota;
// the usage survives a restart.
func TestStoreQuota(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	srv := startServer(t, dir)
	def := dial(t, srv.ClientAddr())
	createStore(t, def, "a", 2, 0)
	createStore(t, def, "b", 0, 10)
	a, b := def.WithStore("a"), def.WithStore("b")
	for _, k := range []string{"k1", "k2"} {
		if _, err := a.Put(ctx, k, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	before, err := a.Get(ctx, "k1")
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.Put(ctx, "k3", []byte("v"))
	if !errors.Is(err, client.ErrNoSpace) || !strings.Contains(err.Error(), `store "a" is at its quota of 2 keys`) {
		t.Fatalf("third key in a: %v, want the key quota refusal", err)
	}
	// Overwriting an existing key is no new key: allowed.
	if _, err := a.Put(ctx, "k1", []byte("v2")); err != nil {
		t.Errorf("overwrite at the key quota: %v", err)
	}
	// A txn adding one key is refused whole.
	if _, err := a.Txn(ctx).Then(client.OpPut("k1", []byte("v3")), client.OpPut("k4", []byte("v"))).Commit(); !errors.Is(err, client.ErrNoSpace) {
		t.Errorf("txn adding a key at the quota: %v", err)
	}
	if kv, _ := a.Get(ctx, "k1"); string(kv.Value) != "v2" {
		t.Errorf("a refused txn wrote k1: %q", kv.Value)
	}
	// Store b writes on (its byte quota is 10: "kk"+"12345678").
	pr, err := b.Put(ctx, "kk", []byte("12345678"))
	if err != nil {
		t.Fatalf("store b while a is full: %v", err)
	}
	if _, err := b.Put(ctx, "z", nil); !errors.Is(err, client.ErrNoSpace) || !strings.Contains(err.Error(), "quota of 10 bytes") {
		t.Errorf("store b over its byte quota: %v", err)
	}
	// The refused writes took no revision.
	if r, err := def.Range(ctx, "k1"); err != nil || r.Revision != pr.Revision {
		t.Errorf("store revision %v after refused writes, want the last write's %d (%v)", r, pr.Revision, err)
	}
	if kv, _ := a.Get(ctx, "k1"); kv.ModRevision != before.ModRevision+2 {
		t.Errorf("k1 mod revision %d, want %d (k2, then the overwrite)", kv.ModRevision, before.ModRevision+2)
	}
	// Deleting frees quota.
	if _, err := a.Delete(ctx, "k2"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Put(ctx, "k3", []byte("v")); err != nil {
		t.Errorf("put after a delete freed quota: %v", err)
	}
	stats := func() *dkvpb.StoreInfo {
		t.Helper()
		r, err := dkvpb.NewStoreClient(def.Conn()).Stats(ctx, &dkvpb.StoreStatsRequest{Name: "a"})
		if err != nil {
			t.Fatal(err)
		}
		return r.Store
	}
	// k1=v2, k3=v: 2 keys, 2+2 + 2+1 bytes.
	if s := stats(); s.Keys != 2 || s.Bytes != 7 || s.MaxKeys != 2 {
		t.Errorf("stats of a: %+v", s)
	}
	srv.Stop()
	def.Close()
	srv = startServer(t, dir)
	def = dial(t, srv.ClientAddr())
	if s := stats(); s.Keys != 2 || s.Bytes != 7 {
		t.Errorf("stats of a after a restart: %+v", s)
	}
	if _, err := def.WithStore("a").Put(ctx, "k9", []byte("v")); !errors.Is(err, client.ErrNoSpace) {
		t.Errorf("a full store after a restart: %v", err)
	}
}

// TestDeleteStoreForce: a store with keys is refused without force; with
// force its keys go at one revision, its watchers see the deletes, and
// a store created again with the name starts empty.
func TestDeleteStoreForce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := startServer(t, t.TempDir())
	def := dial(t, srv.ClientAddr())
	createStore(t, def, "c", 0, 0)
	c := def.WithStore("c")
	for _, k := range []string{"k1", "k2", "k3"} {
		if _, err := c.Put(ctx, k, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := def.Put(ctx, "k1", []byte("default")); err != nil {
		t.Fatal(err)
	}
	w, err := c.WatchPrefix(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := def.DeleteStore(ctx, "c", false); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("delete of a store with keys without force: %v, want ErrConflict", err)
	}
	before, err := def.Range(ctx, "k1")
	if err != nil {
		t.Fatal(err)
	}
	n, err := def.DeleteStore(ctx, "c", true)
	if err != nil || n != 3 {
		t.Fatalf("delete --force: %d %v", n, err)
	}
	after, err := def.Range(ctx, "k1")
	if err != nil {
		t.Fatal(err)
	}
	if after.Revision != before.Revision+1 {
		t.Errorf("delete --force moved the revision from %d to %d, want one revision", before.Revision, after.Revision)
	}
	if len(after.KVs) != 1 || string(after.KVs[0].Value) != "default" {
		t.Errorf("the default store's k1 after deleting store c: %v", keysOf(after))
	}
	var deleted []string
	for len(deleted) < 3 {
		select {
		case b := <-w.Events():
			for _, e := range b.Events {
				if e.Type != client.EventDelete || e.Revision != after.Revision {
					t.Errorf("watch event %+v, want deletes at %d", e, after.Revision)
				}
				deleted = append(deleted, e.KV.Key)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("watch on c saw the deletes of %q only", deleted)
		}
	}
	if strings.Join(deleted, ",") != "k1,k2,k3" {
		t.Errorf("watch on c saw deletes of %q", deleted)
	}
	createStore(t, def, "c", 0, 0)
	if r, err := c.List(ctx, ""); err != nil || len(r.KVs) != 0 {
		t.Errorf("a store created again: %v %v, want empty", keysOf(r), err)
	}
	if s, err := def.StoreStats(ctx, "c"); err != nil || s.Keys != 0 || s.Bytes != 0 {
		t.Errorf("stats of the recreated store: %+v %v", s, err)
	}
}
