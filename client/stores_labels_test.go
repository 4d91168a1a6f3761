package client_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
)

// Labels and queries meet named stores: a key's labels read back in a
// named store; a watch by query in store a sees a's keys only, with their
// markers and store keys; the default store's queries never reach a named
// store's keys, and a named store's Query is refused, not run elsewhere.
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
	if _, err := a.Query(ctx, "prefix=orders/ state=open", client.WithQueryScan()); err == nil || !strings.Contains(err.Error(), "not available in a named store") {
		t.Fatalf("query in a named store: %v, want refused", err)
	}
}
