package mvcc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
)

// orQuery is n alternatives of one distinct label each: l0=v OR l1=v ...
func orQuery(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf("l%d=v", i)
	}
	return "prefix=q/ " + strings.Join(parts, " OR ")
}

// TestQueryLimits: a query of more than MaxQueryTerms terms, or longer
// than MaxQueryBytes, is refused as InvalidInput naming the limit; one
// at the limit is accepted.
func TestQueryLimits(t *testing.T) {
	if _, err := ParseQuery(orQuery(256)); err != nil {
		t.Fatalf("256 terms: %v", err)
	}
	for _, c := range []struct {
		name, q, want string
	}{
		{"257 OR terms", orQuery(257), "257 terms; the limit is 256"},
		{"257 ANDed ranges", func() string {
			var b strings.Builder
			for i := range 257 {
				fmt.Fprintf(&b, "r%d>a ", i)
			}
			return b.String()
		}(), "257 terms; the limit is 256"},
		{"257 values", "a=" + func() string {
			vs := make([]string, 257)
			for i := range vs {
				vs[i] = fmt.Sprint("x", i)
			}
			return strings.Join(vs, "|")
		}(), "257 terms; the limit is 256"},
		{"16 KiB + 1", strings.Repeat("a="+strings.Repeat("v", 200)+" ", 80) + "b=" + strings.Repeat("v", 143), "16385 bytes; the limit is 16384"},
	} {
		_, err := ParseQuery(c.q)
		if codeOf(err) != dkverr.InvalidInput || !strings.Contains(fmt.Sprint(err), c.want) {
			t.Errorf("%s: %.200v; want InvalidInput naming %q", c.name, err, c.want)
		}
	}
}

// loadQueryKeys puts n keys q/0000.. labelled state=open and l<i>=v.
func loadQueryKeys(h *harness, n int) {
	for i := range n {
		h.mustApply(putReq(fmt.Sprintf("q/%04d", i), "v", withLabels(map[string]string{"state": "open", fmt.Sprintf("l%d", i): "v"})))
	}
}

// TestQueryWorkIsLinear: a query of many alternatives reads each key
// once, however many alternatives share the scan or the index that
// serves them (it read every key once per alternative: the work grew
// with the product of keys and terms).
func TestQueryWorkIsLinear(t *testing.T) {
	h := newHarness(t)
	const keys, alts = 20, 128
	loadQueryKeys(h, keys)
	h.mustApply(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_IndexCreate{IndexCreate: &dkvpb.IndexCreateRequest{Prefix: []byte("q/"), Label: "state"}}})
	indexed := make([]string, alts)
	for i := range indexed {
		indexed[i] = fmt.Sprintf("state=open l%d=v", i)
	}
	for _, c := range []struct {
		name string
		q    string
		o    QueryOptions
	}{
		{"scan", orQuery(alts), QueryOptions{Scan: true}},
		{"index", "prefix=q/ " + strings.Join(indexed, " OR "), QueryOptions{}},
	} {
		pq, err := ParseQuery(c.q)
		if err != nil {
			t.Fatal(err)
		}
		visits := 0
		c.o.visit = func() { visits++ }
		res, err := h.s.Query(context.Background(), h.db, pq, c.o)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if len(res.KVs) != keys {
			t.Errorf("%s: %d keys, want %d", c.name, len(res.KVs), keys)
		}
		if visits > keys {
			t.Errorf("%s: %d alternatives over %d keys examined %d records; want at most %d (one per key)", c.name, alts, keys, visits, keys)
		}
	}
}

// TestQueryStopsWhenCancelled: a query whose caller goes away stops
// within a bounded number of records, with the context's error.
func TestQueryStopsWhenCancelled(t *testing.T) {
	h := newHarness(t)
	const keys, cancelAt = 2000, 100
	loadQueryKeys(h, keys)
	pq, err := ParseQuery("prefix=q/ state=open")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	visits := 0
	_, err = h.s.Query(ctx, h.db, pq, QueryOptions{Scan: true, visit: func() {
		if visits++; visits == cancelAt {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("query after its caller went away: %v; want context.Canceled", err)
	}
	if visits > cancelAt+queryCheckEvery {
		t.Errorf("cancelled after %d records, the query examined %d of %d; want at most %d", cancelAt, visits, keys, cancelAt+queryCheckEvery)
	}
	// An already-cancelled context does no work at all.
	visits = 0
	_, err = h.s.Query(ctx, h.db, pq, QueryOptions{Scan: true, visit: func() { visits++ }})
	if !errors.Is(err, context.Canceled) || visits != 0 {
		t.Errorf("query with a cancelled context: %v after %d records; want context.Canceled after 0", err, visits)
	}
}
