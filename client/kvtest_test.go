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

// runKVSuite is the conformance suite every KV deployment must pass; it
// runs against a remote and an embedded client. open returns a client to
// an empty store. Subtests share the store, so each uses its own keys; the
// compaction test runs last.
func runKVSuite(t *testing.T, open func(t *testing.T) *client.Client) {
	c := open(t)
	ctx := func(t *testing.T) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t.Cleanup(cancel)
		return ctx
	}

	t.Run("PutGet", func(t *testing.T) {
		ctx := ctx(t)
		r1, err := c.Put(ctx, "pg/a", []byte("1"))
		if err != nil {
			t.Fatal(err)
		}
		kv, err := c.Get(ctx, "pg/a")
		if err != nil {
			t.Fatal(err)
		}
		if kv.Key != "pg/a" || string(kv.Value) != "1" || kv.Version != 1 || kv.ModRevision != r1.Revision || kv.CreateRevision != r1.Revision {
			t.Fatalf("got %+v after put at rev %d", kv, r1.Revision)
		}
		r2, err := c.Put(ctx, "pg/a", []byte("2"), client.WithPrevKV())
		if err != nil {
			t.Fatal(err)
		}
		if r2.Revision <= r1.Revision {
			t.Fatalf("revision did not grow: %d then %d", r1.Revision, r2.Revision)
		}
		if r2.PrevKV == nil || string(r2.PrevKV.Value) != "1" {
			t.Fatalf("prev kv = %+v, want value 1", r2.PrevKV)
		}
		kv, err = c.Get(ctx, "pg/a")
		if err != nil {
			t.Fatal(err)
		}
		if string(kv.Value) != "2" || kv.Version != 2 || kv.CreateRevision != r1.Revision || kv.ModRevision != r2.Revision {
			t.Fatalf("after overwrite got %+v", kv)
		}
		_, err = c.Get(ctx, "pg/missing")
		if !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("get of missing key: %v, want ErrNotFound", err)
		}
		// Empty values are values.
		if _, err := c.Put(ctx, "pg/empty", nil); err != nil {
			t.Fatal(err)
		}
		if kv, err := c.Get(ctx, "pg/empty"); err != nil || len(kv.Value) != 0 {
			t.Fatalf("empty value: %+v, %v", kv, err)
		}
		// Serializable reads see an acknowledged write on a single node.
		if kv, err := c.Get(ctx, "pg/a", client.WithSerializable()); err != nil || string(kv.Value) != "2" {
			t.Fatalf("serializable get: %+v, %v", kv, err)
		}
	})

	t.Run("History", func(t *testing.T) {
		ctx := ctx(t)
		var revs []int64
		for i := range 3 {
			r, err := c.Put(ctx, "hist/k", fmt.Appendf(nil, "v%d", i))
			if err != nil {
				t.Fatal(err)
			}
			revs = append(revs, r.Revision)
		}
		d, err := c.Delete(ctx, "hist/k")
		if err != nil || d.Deleted != 1 {
			t.Fatalf("delete: %+v, %v", d, err)
		}
		for i, rev := range revs {
			kv, err := c.Get(ctx, "hist/k", client.WithRev(rev))
			if err != nil {
				t.Fatalf("get at rev %d: %v", rev, err)
			}
			if want := fmt.Sprintf("v%d", i); string(kv.Value) != want || kv.Version != int64(i+1) {
				t.Fatalf("at rev %d got %q version %d, want %q version %d", rev, kv.Value, kv.Version, want, i+1)
			}
		}
		if _, err := c.Get(ctx, "hist/k"); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("deleted key: %v, want ErrNotFound", err)
		}
		if _, err := c.Get(ctx, "hist/k", client.WithRev(revs[0]-1)); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("key before creation: %v, want ErrNotFound", err)
		}
	})

	t.Run("ListLimitSort", func(t *testing.T) {
		ctx := ctx(t)
		for _, k := range []string{"ls/c", "ls/a", "ls/b", "ls/d", "lt/x"} {
			if _, err := c.Put(ctx, k, []byte("val-"+k)); err != nil {
				t.Fatal(err)
			}
		}
		r, err := c.List(ctx, "ls/")
		if err != nil {
			t.Fatal(err)
		}
		if got := keys(r); got != "ls/a ls/b ls/c ls/d" || r.Count != 4 || r.More {
			t.Fatalf("list = %q count %d more %v", got, r.Count, r.More)
		}
		r, err = c.Range(ctx, "ls/", client.WithPrefix(), client.WithLimit(2))
		if err != nil {
			t.Fatal(err)
		}
		if got := keys(r); got != "ls/a ls/b" || !r.More || r.Count != 4 {
			t.Fatalf("limited = %q more %v count %d", got, r.More, r.Count)
		}
		r, err = c.Range(ctx, "ls/b", client.WithRange("ls/d"))
		if err != nil {
			t.Fatal(err)
		}
		if got := keys(r); got != "ls/b ls/c" {
			t.Fatalf("range [ls/b, ls/d) = %q", got)
		}
		r, err = c.List(ctx, "ls/", client.WithSort(client.SortByKey, client.SortDescend))
		if err != nil {
			t.Fatal(err)
		}
		if got := keys(r); got != "ls/d ls/c ls/b ls/a" {
			t.Fatalf("descending = %q", got)
		}
		r, err = c.List(ctx, "ls/", client.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		if keys(r) != "ls/a ls/b ls/c ls/d" || len(r.KVs[0].Value) != 0 {
			t.Fatalf("keys only returned values: %+v", r.KVs[0])
		}
		r, err = c.List(ctx, "ls/", client.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if r.Count != 4 || len(r.KVs) != 0 {
			t.Fatalf("count only: count %d, %d kvs", r.Count, len(r.KVs))
		}
		if _, err := c.Range(ctx, "ls/", client.WithPrefix(), client.WithRange("z")); !errors.Is(err, client.ErrInvalidInput) {
			t.Fatalf("prefix+range: %v, want ErrInvalidInput", err)
		}
	})

	t.Run("Delete", func(t *testing.T) {
		ctx := ctx(t)
		for _, k := range []string{"del/a", "del/b", "del/c", "dem"} {
			if _, err := c.Put(ctx, k, []byte(k)); err != nil {
				t.Fatal(err)
			}
		}
		d, err := c.Delete(ctx, "del/a", client.WithPrevKV())
		if err != nil {
			t.Fatal(err)
		}
		if d.Deleted != 1 || len(d.PrevKVs) != 1 || string(d.PrevKVs[0].Value) != "del/a" {
			t.Fatalf("delete one: %+v", d)
		}
		d, err = c.Delete(ctx, "del/", client.WithPrefix())
		if err != nil || d.Deleted != 2 {
			t.Fatalf("delete prefix: %+v, %v", d, err)
		}
		d, err = c.Delete(ctx, "del/none")
		if err != nil || d.Deleted != 0 {
			t.Fatalf("delete of missing key: %+v, %v", d, err)
		}
		if _, err := c.Get(ctx, "dem"); err != nil {
			t.Fatalf("prefix delete went past its prefix: %v", err)
		}
		if _, err := c.Delete(ctx, "dem", client.IfVersion(5)); !errors.Is(err, client.ErrConflict) {
			t.Fatalf("delete if-version 5 of a version-1 key: %v, want ErrConflict", err)
		}
		if d, err := c.Delete(ctx, "dem", client.IfVersion(1)); err != nil || d.Deleted != 1 {
			t.Fatalf("delete if-version 1: %+v, %v", d, err)
		}
	})

	t.Run("ConditionalPut", func(t *testing.T) {
		ctx := ctx(t)
		r, err := c.Put(ctx, "cond/k", []byte("a"), client.IfAbsent())
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Put(ctx, "cond/k", []byte("b"), client.IfAbsent())
		if !errors.Is(err, client.ErrConflict) {
			t.Fatalf("if-absent on existing key: %v, want ErrConflict", err)
		}
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Msg == "" {
			t.Fatalf("conflict lost the server's message: %#v", err)
		}
		if _, err := c.Put(ctx, "cond/k", []byte("b"), client.IfVersion(2)); !errors.Is(err, client.ErrConflict) {
			t.Fatalf("wrong if-version: %v, want ErrConflict", err)
		}
		if _, err := c.Put(ctx, "cond/k", []byte("b"), client.IfModRevision(r.Revision+1000)); !errors.Is(err, client.ErrConflict) {
			t.Fatalf("wrong if-mod-revision: %v, want ErrConflict", err)
		}
		if _, err := c.Put(ctx, "cond/k", []byte("b"), client.IfVersion(1)); err != nil {
			t.Fatalf("right if-version: %v", err)
		}
		kv, err := c.Get(ctx, "cond/k")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Put(ctx, "cond/k", []byte("c"), client.IfModRevision(kv.ModRevision)); err != nil {
			t.Fatalf("right if-mod-revision: %v", err)
		}
		if kv, _ := c.Get(ctx, "cond/k"); string(kv.Value) != "c" {
			t.Fatalf("value %q, want c: a failed conditional put changed it", kv.Value)
		}
	})

	t.Run("Txn", func(t *testing.T) {
		ctx := ctx(t)
		if _, err := c.Put(ctx, "txn/a", []byte("1")); err != nil {
			t.Fatal(err)
		}
		// Compare-and-swap that holds.
		res, err := c.Txn(ctx).
			If(client.Value("txn/a").Equal([]byte("1")), client.Missing("txn/b")).
			Then(client.OpPut("txn/a", []byte("2")), client.OpPut("txn/b", []byte("x")), client.OpGet("txn/a")).
			Else(client.OpGet("txn/a")).
			Commit()
		if err != nil {
			t.Fatal(err)
		}
		if !res.Succeeded || len(res.Responses) != 3 || res.Responses[0].Put == nil || res.Responses[2].Get == nil {
			t.Fatalf("txn result %+v", res)
		}
		if got := res.Responses[2].Get.KVs; len(got) != 1 || string(got[0].Value) != "2" {
			t.Fatalf("get inside txn saw %+v, want the txn's own put", got)
		}
		a, _ := c.Get(ctx, "txn/a")
		b, _ := c.Get(ctx, "txn/b")
		if a == nil || b == nil || a.ModRevision != res.Revision || b.ModRevision != res.Revision {
			t.Fatalf("txn writes not at one revision %d: a=%+v b=%+v", res.Revision, a, b)
		}
		// The same compare-and-swap now fails and runs Else.
		res, err = c.Txn(ctx).
			If(client.Value("txn/a").Equal([]byte("1"))).
			Then(client.OpPut("txn/a", []byte("3"))).
			Else(client.OpGet("txn/a")).
			Commit()
		if err != nil {
			t.Fatal(err)
		}
		if res.Succeeded || len(res.Responses) != 1 || res.Responses[0].Get == nil || string(res.Responses[0].Get.KVs[0].Value) != "2" {
			t.Fatalf("failed txn result %+v", res)
		}
		for _, tc := range []struct {
			cmp  client.Cmp
			want bool
		}{
			{client.Version("txn/a").Equal(2), true},
			{client.Version("txn/a").Greater(2), false},
			{client.Version("txn/a").Less(3), true},
			{client.CreateRevision("txn/a").Equal(a.CreateRevision), true},
			{client.ModRevision("txn/a").NotEqual(a.ModRevision), false},
			{client.Value("txn/a").Greater([]byte("1")), true},
			{client.Value("txn/a").Less([]byte("1")), false},
			{client.Value("txn/a").NotEqual([]byte("1")), true},
			{client.Value("txn/a").Equal([]byte("1")), false},
			{client.Version("txn/a").NotEqual(2), false},
			{client.Version("txn/a").Less(2), false},
			{client.Version("txn/a").Greater(1), true},
			{client.Exists("txn/a"), true},
			{client.Exists("txn/none"), false},
			{client.Missing("txn/none"), true},
			{client.Version("txn/none").Equal(0), true},
		} {
			res, err := c.Txn(ctx).If(tc.cmp).Commit()
			if err != nil {
				t.Fatal(err)
			}
			if res.Succeeded != tc.want {
				t.Errorf("compare %+v: succeeded=%v, want %v", tc.cmp, res.Succeeded, tc.want)
			}
		}
		// Misuse of the builder is caught before sending.
		if _, err := c.Txn(ctx).Then().If().Commit(); !errors.Is(err, client.ErrInvalidInput) {
			t.Fatalf("If after Then: %v, want ErrInvalidInput", err)
		}
	})

	t.Run("Counter", func(t *testing.T) {
		ctx := ctx(t)
		v, err := c.Counter(ctx, "ctr/a", 5)
		if err != nil || v != 5 {
			t.Fatalf("counter from absent: %d, %v", v, err)
		}
		v, err = c.Counter(ctx, "ctr/a", -2)
		if err != nil || v != 3 {
			t.Fatalf("counter -2: %d, %v", v, err)
		}
		if _, err := c.Counter(ctx, "ctr/a", -4, client.WithMin(0)); !errors.Is(err, client.ErrConflict) {
			t.Fatalf("counter below min: %v, want ErrConflict", err)
		}
		if _, err := c.Counter(ctx, "ctr/a", 8, client.WithMax(10)); !errors.Is(err, client.ErrConflict) {
			t.Fatalf("counter above max: %v, want ErrConflict", err)
		}
		v, err = c.Counter(ctx, "ctr/a", 7, client.WithMin(0), client.WithMax(10))
		if err != nil || v != 10 {
			t.Fatalf("counter to max: %d, %v", v, err)
		}
		if kv, err := c.Get(ctx, "ctr/a"); err != nil || string(kv.Value) != "10" {
			t.Fatalf("counter value reads as %+v, %v; want decimal 10", kv, err)
		}
		if _, err := c.Put(ctx, "ctr/text", []byte("hello")); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Counter(ctx, "ctr/text", 1); err == nil {
			t.Fatal("counter on a non-integer value succeeded")
		}
	})

	t.Run("JSON", func(t *testing.T) {
		ctx := ctx(t)
		type cfg struct {
			Name  string
			Ports []int
		}
		if _, err := client.PutJSON(ctx, c, "json/a", cfg{"web", []int{80, 443}}); err != nil {
			t.Fatal(err)
		}
		got, kv, err := client.GetJSON[cfg](ctx, c, "json/a")
		if err != nil {
			t.Fatal(err)
		}
		if got.Name != "web" || len(got.Ports) != 2 || kv.Version != 1 {
			t.Fatalf("got %+v %+v", got, kv)
		}
		if _, _, err := client.GetJSON[cfg](ctx, c, "json/none"); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("missing: %v", err)
		}
		if _, err := c.Put(ctx, "json/bad", []byte("{")); err != nil {
			t.Fatal(err)
		}
		if _, _, err := client.GetJSON[cfg](ctx, c, "json/bad"); err == nil {
			t.Fatal("decoding invalid JSON succeeded")
		}
	})

	t.Run("BadInput", func(t *testing.T) {
		ctx := ctx(t)
		ops := make([]client.Op, 1000)
		for i := range ops {
			ops[i] = client.OpPut(fmt.Sprintf("bad/txn/%d", i), []byte("x"))
		}
		for _, tc := range []struct {
			name  string
			do    func() error
			limit []string // the message must name one of these
		}{
			{"empty key", func() error { _, err := c.Put(ctx, "", []byte("x")); return err }, []string{"empty"}},
			{"empty key get", func() error { _, err := c.Get(ctx, ""); return err }, []string{"empty"}},
			{"5 KiB key", func() error { _, err := c.Put(ctx, strings.Repeat("k", 5<<10), []byte("x")); return err }, []string{"4096", "4 KiB", "4KiB"}},
			{"2 MiB value", func() error { _, err := c.Put(ctx, "bad/v", make([]byte, 2<<20)); return err }, []string{"1048576", "1 MiB", "1MiB"}},
			{"1000-op txn", func() error { _, err := c.Txn(ctx).Then(ops...).Commit(); return err }, []string{"128"}},
		} {
			err := tc.do()
			if !errors.Is(err, client.ErrInvalidInput) {
				t.Errorf("%s: %v, want ErrInvalidInput", tc.name, err)
				continue
			}
			named := false
			for _, l := range tc.limit {
				named = named || strings.Contains(err.Error(), l)
			}
			if !named {
				t.Errorf("%s: message %q does not name the limit (one of %q)", tc.name, err, tc.limit)
			}
		}
		if _, err := c.Get(ctx, "bad/v"); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("rejected put left a key: %v", err)
		}
		if r, err := c.List(ctx, "bad/txn/"); err != nil || r.Count != 0 {
			t.Fatalf("rejected txn left %v keys, %v", r, err)
		}
		if _, err := c.Put(ctx, "bad/opt", []byte("x"), client.WithRev(3)); !errors.Is(err, client.ErrInvalidInput) {
			t.Fatalf("put WithRev: %v, want ErrInvalidInput", err)
		}
	})

	t.Run("StatusMembers", func(t *testing.T) {
		ctx := ctx(t)
		st, err := c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.GetRevision() <= 0 || st.GetLeaderId() == 0 || st.GetLeaderId() != st.GetMemberId() {
			t.Fatalf("status of a single node: %+v", st)
		}
		ml, err := c.MemberList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ml.GetMembers()) != 1 {
			t.Fatalf("members: %+v", ml.GetMembers())
		}
	})

	// Last: compaction discards history the other subtests might read.
	t.Run("Compact", func(t *testing.T) {
		ctx := ctx(t)
		r1, err := c.Put(ctx, "cmp/k", []byte("old"))
		if err != nil {
			t.Fatal(err)
		}
		r2, err := c.Put(ctx, "cmp/k", []byte("new"))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Compact(ctx, r2.Revision); err != nil {
			t.Fatal(err)
		}
		_, err = c.Get(ctx, "cmp/k", client.WithRev(r1.Revision))
		if !errors.Is(err, client.ErrCompacted) {
			t.Fatalf("read below compaction: %v, want ErrCompacted", err)
		}
		if kv, err := c.Get(ctx, "cmp/k", client.WithRev(r2.Revision)); err != nil || string(kv.Value) != "new" {
			t.Fatalf("read at compaction revision: %+v, %v", kv, err)
		}
		if kv, err := c.Get(ctx, "cmp/k"); err != nil || string(kv.Value) != "new" {
			t.Fatalf("current read after compaction: %+v, %v", kv, err)
		}
		if err := c.Compact(ctx, r1.Revision); !errors.Is(err, client.ErrCompacted) {
			t.Fatalf("compacting below the compaction revision: %v, want ErrCompacted", err)
		}
	})
}

func keys(r *client.RangeResult) string {
	var ks []string
	for _, kv := range r.KVs {
		ks = append(ks, kv.Key)
	}
	return strings.Join(ks, " ")
}
