package storekeys

import (
	"bytes"
	"testing"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
)

func mustFor(t *testing.T, name string) Mapper {
	t.Helper()
	m, err := For(name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestNames(t *testing.T) {
	for _, ok := range []string{"a", "orders", "a.b-c_d", "0", string(bytes.Repeat([]byte("x"), 63))} {
		if err := ValidName(ok); err != nil {
			t.Errorf("ValidName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "A", "a/b", ".a", "-a", "a b", string(bytes.Repeat([]byte("x"), 64))} {
		if err := ValidName(bad); dkverr.CodeOf(err) != dkverr.InvalidInput {
			t.Errorf("ValidName(%q) = %v, want InvalidInput", bad, err)
		}
	}
}

func TestKeyRoundTrip(t *testing.T) {
	a, ab := mustFor(t, "a"), mustFor(t, "a.b")
	for _, k := range []string{"x", "a/", "\x00", "\xff\xff\xff\xff"} {
		p, err := a.Key([]byte(k))
		if err != nil {
			t.Fatal(err)
		}
		if name, ok := StoreOf(p); !ok || name != "a" {
			t.Errorf("StoreOf(%q) = %q, %v", p, name, ok)
		}
		back, ok := a.Strip(p)
		if !ok || string(back) != k {
			t.Errorf("Strip(Key(%q)) = %q, %v", k, back, ok)
		}
		if _, ok := ab.Strip(p); ok {
			t.Errorf("store a.b claims store a's key %q", p)
		}
		if _, ok := (Mapper{}).Strip(p); ok {
			t.Errorf("the default store claims store a's key %q", p)
		}
	}
}

func TestDefaultStoreCannotReachNamedStores(t *testing.T) {
	d := Mapper{}
	if _, err := d.Key([]byte(Reserved + "a/x")); dkverr.CodeOf(err) != dkverr.InvalidInput {
		t.Fatalf("default-store key in the reserved range: %v, want InvalidInput", err)
	}
	if _, err := d.Key([]byte("\xff\xff\xffz")); dkverr.CodeOf(err) != dkverr.InvalidInput {
		t.Fatalf("default-store key after the reserved prefix: %v, want InvalidInput", err)
	}
	if k, err := d.Key([]byte("\xff\xff")); err != nil || string(k) != "\xff\xff" {
		t.Fatalf("a key before the reserved prefix: %q, %v", k, err)
	}
	for _, c := range []struct {
		key, end string
		prefix   bool
		wantEnd  string
	}{
		{"", "\x00", false, Reserved},              // every key
		{"a", "\x00", false, Reserved},             // from a on
		{"a", "\xff\xff\xff\xff", false, Reserved}, // past the prefix
		{"a", "b", false, "b"},                     // untouched
		{"", "", true, Reserved},                   // prefix "" = every key
		{"\xff", "", true, Reserved},               // prefix covering the reserved range
		{"a", "", true, "b"},                       // ordinary prefix
	} {
		k, end, prefix, err := d.Range([]byte(c.key), []byte(c.end), c.prefix)
		if err != nil || prefix || string(k) != c.key || string(end) != c.wantEnd {
			t.Errorf("Range(%q, %q, %v) = %q, %q, %v, %v; want end %q", c.key, c.end, c.prefix, k, end, prefix, err, c.wantEnd)
		}
	}
	if _, _, _, err := d.Range([]byte(Reserved), []byte("\x00"), false); dkverr.CodeOf(err) != dkverr.InvalidInput {
		t.Errorf("default-store range starting in the reserved range: %v", err)
	}
}

func TestNamedRange(t *testing.T) {
	a := mustFor(t, "a")
	pre := string(Prefix("a"))
	for _, c := range []struct {
		key, end         string
		prefix           bool
		wantKey, wantEnd string
		wantPrefix       bool
	}{
		{"x", "", false, pre + "x", "", false},
		{"x", "y", false, pre + "x", pre + "y", false},
		{"", "\x00", false, pre, Reserved + "a0", false},
		{"x", "\x00", false, pre + "x", Reserved + "a0", false},
		{"", "", true, pre, "", true},
		{"job/", "", true, pre + "job/", "", true},
	} {
		k, end, prefix, err := a.Range([]byte(c.key), []byte(c.end), c.prefix)
		if err != nil || string(k) != c.wantKey || string(end) != c.wantEnd || prefix != c.wantPrefix {
			t.Errorf("Range(%q, %q, %v) = %q, %q, %v, %v", c.key, c.end, c.prefix, k, end, prefix, err)
		}
	}
	// A store's whole span excludes every longer name sharing its start.
	_, end := a.Span()
	ab, _ := mustFor(t, "a.b").Span()
	a0, _ := mustFor(t, "a0").Span()
	if bytes.Compare(ab, end) < 0 && bytes.Compare(ab, Prefix("a")) >= 0 {
		t.Errorf("store a.b's prefix %q is inside store a's span", ab)
	}
	if bytes.Compare(a0, end) < 0 && bytes.Compare(a0, Prefix("a")) >= 0 {
		t.Errorf("store a0's prefix %q is inside store a's span", a0)
	}
}

func TestTxnNesting(t *testing.T) {
	a := mustFor(t, "a")
	pre := string(Prefix("a"))
	inner := &dkvpb.TxnRequest{
		Compare: []*dkvpb.Compare{{Key: []byte("c2"), RangeEnd: []byte("\x00")}},
		Success: []*dkvpb.RequestOp{{Request: &dkvpb.RequestOp_RequestDeleteRange{RequestDeleteRange: &dkvpb.DeleteRangeRequest{Key: []byte("d"), Prefix: true}}}},
	}
	txn := &dkvpb.TxnRequest{
		Compare: []*dkvpb.Compare{{Key: []byte("c"), TargetUnion: &dkvpb.Compare_Lock{Lock: &dkvpb.LockHandle{Key: []byte("l")}}}},
		Success: []*dkvpb.RequestOp{
			{Request: &dkvpb.RequestOp_RequestPut{RequestPut: &dkvpb.PutRequest{Key: []byte("p"), Lock: &dkvpb.LockHandle{Key: []byte("l")}}}},
			{Request: &dkvpb.RequestOp_RequestTxn{RequestTxn: inner}},
		},
		Failure: []*dkvpb.RequestOp{{Request: &dkvpb.RequestOp_RequestRange{RequestRange: &dkvpb.RangeRequest{Key: []byte("r")}}}},
	}
	if known, err := a.Request(txn); !known || err != nil {
		t.Fatal(known, err)
	}
	for _, c := range []struct{ got, want string }{
		{string(txn.Compare[0].Key), pre + "c"},
		{string(txn.Compare[0].GetLock().Key), pre + "l"},
		{string(txn.Success[0].GetRequestPut().Key), pre + "p"},
		{string(txn.Success[0].GetRequestPut().Lock.Key), pre + "l"},
		{string(inner.Compare[0].Key), pre + "c2"},
		{string(inner.Compare[0].RangeEnd), Reserved + "a0"},
		{string(inner.Success[0].GetRequestDeleteRange().Key), pre + "d"},
		{string(txn.Failure[0].GetRequestRange().Key), pre + "r"},
	} {
		if c.got != c.want {
			t.Errorf("mapped %q, want %q", c.got, c.want)
		}
	}

	// The default store refuses a nested op in the reserved range.
	bad := &dkvpb.TxnRequest{Success: []*dkvpb.RequestOp{{Request: &dkvpb.RequestOp_RequestTxn{RequestTxn: &dkvpb.TxnRequest{
		Success: []*dkvpb.RequestOp{{Request: &dkvpb.RequestOp_RequestPut{RequestPut: &dkvpb.PutRequest{Key: []byte(pre + "x")}}}},
	}}}}}
	if _, err := (Mapper{}).Request(bad); dkverr.CodeOf(err) != dkverr.InvalidInput {
		t.Errorf("nested reserved put in the default store: %v", err)
	}

	// Replies come back without the prefix, and the original key-values
	// are left as they were (they may be shared).
	shared := &dkvpb.KeyValue{Key: []byte(pre + "p")}
	resp := &dkvpb.TxnResponse{Responses: []*dkvpb.ResponseOp{
		{Response: &dkvpb.ResponseOp_ResponsePut{ResponsePut: &dkvpb.PutResponse{PrevKv: shared}}},
		{Response: &dkvpb.ResponseOp_ResponseTxn{ResponseTxn: &dkvpb.TxnResponse{Responses: []*dkvpb.ResponseOp{
			{Response: &dkvpb.ResponseOp_ResponseRange{ResponseRange: &dkvpb.RangeResponse{Kvs: []*dkvpb.KeyValue{shared}}}},
		}}}},
	}}
	a.Response(resp)
	if got := string(resp.Responses[0].GetResponsePut().PrevKv.Key); got != "p" {
		t.Errorf("prev_kv key %q, want p", got)
	}
	if got := string(resp.Responses[1].GetResponseTxn().Responses[0].GetResponseRange().Kvs[0].Key); got != "p" {
		t.Errorf("nested range key %q, want p", got)
	}
	if string(shared.Key) != pre+"p" {
		t.Errorf("the shared key-value was modified: %q", shared.Key)
	}
}

func TestLeaseKeysFiltered(t *testing.T) {
	a := mustFor(t, "a")
	keys := [][]byte{[]byte("plain"), append(Prefix("a"), 'x'), append(Prefix("b"), 'x')}
	r := &dkvpb.LeaseTimeToLiveResponse{Keys: keys}
	a.Response(r)
	if len(r.Keys) != 1 || string(r.Keys[0]) != "x" {
		t.Errorf("store a sees lease keys %q", r.Keys)
	}
	r = &dkvpb.LeaseTimeToLiveResponse{Keys: keys}
	(Mapper{}).Response(r)
	if len(r.Keys) != 1 || string(r.Keys[0]) != "plain" {
		t.Errorf("the default store sees lease keys %q", r.Keys)
	}
}

func TestDefaultQueuePrefixCannotCoverNamedStores(t *testing.T) {
	for _, p := range []string{"\xff\xff\xff", "\xff\xff\xffdkv/", Reserved} {
		if _, err := (Mapper{}).Request(&dkvpb.QueueClaimRequest{QueuePrefix: []byte(p)}); dkverr.CodeOf(err) != dkverr.InvalidInput {
			t.Errorf("default-store queue prefix %q: %v, want InvalidInput", p, err)
		}
	}
	if _, err := (Mapper{}).Request(&dkvpb.QueueClaimRequest{QueuePrefix: []byte("dkv.queue/jobs/")}); err != nil {
		t.Errorf("an ordinary queue prefix: %v", err)
	}
}
