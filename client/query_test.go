package client_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
)

func queryKeys(t *testing.T, c *client.Client, q string, opts ...client.QueryOption) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.Query(ctx, q, opts...)
	if err != nil {
		t.Fatalf("query %q: %v", q, err)
	}
	var ks []string
	for _, kv := range r.KVs {
		ks = append(ks, kv.Key)
	}
	return ks
}

// TestQueryClient: labels, a query refused without an index
// (ErrNoIndex), served by one, a label compare, a watch by query replayed
// from history with its markers, and the index surviving a restart.
func TestQueryClient(t *testing.T) {
	dir := t.TempDir()
	c := openEmbedded(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	put := func(k, state string) int64 {
		t.Helper()
		r, err := c.Put(ctx, k, []byte("v"), client.WithLabels(map[string]string{"state": state}))
		if err != nil {
			t.Fatal(err)
		}
		return r.Revision
	}
	start := put("orders/1", "open")
	put("orders/2", "paid")
	if _, err := c.Query(ctx, "prefix=orders/ state=open"); !errors.Is(err, client.ErrNoIndex) {
		t.Fatalf("query without an index: %v, want ErrNoIndex", err)
	}
	if _, err := c.CreateIndex(ctx, "orders/", "state"); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(queryKeys(t, c, "prefix=orders/ state=open")); got != "[orders/1]" {
		t.Fatalf("query: %s", got)
	}
	tr, err := c.Txn(ctx).If(client.Label("orders/2", "state").Equal("paid")).
		Then(client.OpPut("orders/2", []byte("v"), client.WithLabels(map[string]string{"state": "open"}))).Commit()
	if err != nil || !tr.Succeeded {
		t.Fatalf("txn on a label compare: %v %v", tr, err)
	}
	put("orders/1", "shipped")
	if _, err := c.Delete(ctx, "orders/2"); err != nil {
		t.Fatal(err)
	}

	// Replayed from the first put: every marker comes from history.
	w, err := c.WatchQuery(ctx, "prefix=orders/ state=open", client.WithStartRevision(start))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var got []string
	for len(got) < 4 {
		for _, e := range next(t, w).Events {
			got = append(got, fmt.Sprintf("%s %s", e.Marker, e.KV.Key))
		}
	}
	if fmt.Sprint(got) != "[ENTER orders/1 ENTER orders/2 LEAVE orders/1 LEAVE orders/2]" {
		t.Fatalf("watch by query: %v", got)
	}
	put("orders/3", "open")
	if b := next(t, w); len(b.Events) != 1 || b.Events[0].Marker != client.QueryEnter || b.Events[0].KV.Key != "orders/3" {
		t.Fatalf("live event: %+v", b)
	}

	c.Close()
	c = openEmbedded(t, dir)
	if got := fmt.Sprint(queryKeys(t, c, "prefix=orders/ state=open")); got != "[orders/3]" {
		t.Fatalf("query after a restart: %s", got)
	}
	ixs, err := c.ListIndexes(ctx)
	if err != nil || len(ixs) != 1 || ixs[0].Prefix != "orders/" || ixs[0].Label != "state" {
		t.Fatalf("indexes after a restart: %v %v", ixs, err)
	}
}
