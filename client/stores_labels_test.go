package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
)

// Labels and queries meet named stores: a key's labels read back in a
// named store; a watch by query in store a sees a's keys only, with their
// markers and store keys; queries and indexes are each store's own, and
// the default store's queries never reach a named store's keys.
func TestStoresWithLabelsAndQueries(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := startServer(t, t.TempDir())
	def := dial(t, srv.ClientAddr())
	createStore(t, def, "a", 0, 0)
	createStore(t, def, "b", 0, 0)
	a, b := def.WithStore("a"), def.WithStore("b")
	open := client.WithLabels(map[string]string{"state": "open"})

	w, err := a.WatchQuery(ctx, "prefix=orders/ state=open")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for _, c := range []*client.Client{b, def, a} {
		if _, err := c.Put(ctx, "orders/1", []byte("v"), open); err != nil {
			t.Fatal(err)
		}
	}
	r, err := a.Get(ctx, "orders/1")
	if err != nil || r == nil || r.Labels["state"] != "open" {
		t.Fatalf("get in store a: %+v %v, want the key with label state=open", r, err)
	}
	if bt := next(t, w); len(bt.Events) != 1 || bt.Events[0].Marker != client.QueryEnter || bt.Events[0].KV.Key != "orders/1" || bt.Events[0].KV.Labels["state"] != "open" {
		t.Fatalf("watch by query in store a: %+v, want one ENTER of orders/1 (a's own)", bt)
	}

	// Default store: a scan of every key returns its own key only.
	got := queryKeys(t, def, "prefix= state=open", client.WithQueryScan())
	if fmt.Sprint(got) != "[orders/1]" {
		t.Fatalf("default-store scan of every key: %v, want [orders/1] only", got)
	}
	// (A query text is a proto string, valid UTF-8, so it cannot name the
	// reserved prefix, which starts with 0xff.)
	// Store a: its own key, from a scan and from an index of its own,
	// which the default store does not list.
	if got := queryKeys(t, a, "prefix=orders/ state=open", client.WithQueryScan()); fmt.Sprint(got) != "[orders/1]" {
		t.Fatalf("scan in store a: %v", got)
	}
	if ix, err := a.CreateIndex(ctx, "orders/", "state"); err != nil || ix.Prefix != "orders/" {
		t.Fatalf("create an index in store a: %+v %v, want it on a's orders/", ix, err)
	}
	r2, err := a.Query(ctx, "prefix=orders/ state=open")
	if err != nil || len(r2.KVs) != 1 || r2.KVs[0].Key != "orders/1" || strings.Contains(r2.Plan, "dkv/stores") {
		t.Fatalf("indexed query in store a: %+v %v, want orders/1 from a's index", r2, err)
	}
	if ixs, err := a.ListIndexes(ctx); err != nil || len(ixs) != 1 || ixs[0].Prefix != "orders/" {
		t.Fatalf("store a's indexes: %+v %v", ixs, err)
	}
	if err := b.DropIndex(ctx, "orders/", "state"); err == nil || strings.Contains(err.Error(), "dkv/stores") {
		t.Fatalf("drop in store b of an index only a has: %v, want an error naming b's own prefix", err)
	}
	if ixs, err := def.ListIndexes(ctx); err != nil || len(ixs) != 0 {
		t.Fatalf("default store's indexes: %+v %v, want none (a's is a's)", ixs, err)
	}
	if _, err := b.Query(ctx, "prefix=orders/ state=open"); !errors.Is(err, client.ErrNoIndex) || !strings.Contains(err.Error(), `under "orders/"; create one with: dkv --store b index create orders/ state`) {
		t.Fatalf("store b, which has no index: %v, want ErrNoIndex naming b's own prefix and the command", err)
	}
}
