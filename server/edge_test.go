package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// startHTTPTestServer starts a node with an HTTP listener and returns it,
// its base URL and an in-process connection.
func startHTTPTestServer(t *testing.T, cfg Config) (*Server, string, *grpc.ClientConn) {
	t.Helper()
	cfg.DataDir = t.TempDir()
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.TickInterval = 10 * time.Millisecond
	cfg.NoSync = true
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	conn := startInProcess(t, s)
	return s, "http://" + s.HTTPAddr(), conn
}

// post sends body (unsized, so chunked, unless sized) and returns the
// status and response body.
func post(t *testing.T, url string, body io.Reader) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Post(url, "application/json", body)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// unsized hides the length of a reader from net/http (no Content-Length).
type unsized struct{ io.Reader }

// TestHTTPBodyOverLimitIs413: a request body over the
// limit is refused with 413 naming the limit, without reading it all,
// whether or not it declares its length; the plain-value endpoint caps at
// the value limit; a request gRPC refuses as oversized is 413, not 429.
func TestHTTPBodyOverLimitIs413(t *testing.T) {
	const maxValue = 64 << 10
	s, base, conn := startHTTPTestServer(t, Config{MaxValueBytes: maxValue})
	limit := s.jsonBodyLimit()
	huge := func() io.Reader { // a put whose value is 16 MiB of base64
		return io.MultiReader(strings.NewReader(`{"key":"a2V5","value":"`),
			io.LimitReader(repeatReader('A'), 16<<20), strings.NewReader(`"}`))
	}
	for _, tc := range []struct {
		name string
		body io.Reader
	}{
		{"chunked", unsized{huge()}},
		{"content-length", bytes.NewReader(must(io.ReadAll(huge())))},
	} {
		code, msg := post(t, base+"/v1/kv/put", tc.body)
		if code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, fmt.Sprint(limit)) {
			t.Errorf("%s: 16 MiB put: %d %s, want 413 naming the limit %d", tc.name, code, msg, limit)
		}
	}

	req, _ := http.NewRequest(http.MethodPut, base+"/v1/keys/big", unsized{io.LimitReader(repeatReader('v'), maxValue+1)})
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), fmt.Sprint(maxValue)) {
		t.Errorf("PUT /v1/keys with a value over the limit: %d %s, want 413 naming %d", resp.StatusCode, b, maxValue)
	}

	// Under the body cap but over the gRPC request limit once decoded: a
	// txn of 65 values of the maximum size.
	val := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{'x'}, maxValue))
	var ops []string
	for i := 0; i < 65; i++ {
		ops = append(ops, fmt.Sprintf(`{"request_put":{"key":%q,"value":%q}}`, base64.StdEncoding.EncodeToString([]byte(fmt.Sprint("k", i))), val))
	}
	txn := `{"success":[` + strings.Join(ops, ",") + `]}`
	if int64(len(txn)) > limit {
		t.Fatalf("test txn is %d bytes, over the body limit %d", len(txn), limit)
	}
	code, msg := post(t, base+"/v1/kv/txn", strings.NewReader(txn))
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, fmt.Sprint(s.maxRequestBytes())) {
		t.Errorf("txn over the gRPC limit: %d %.300s, want 413 naming %d", code, msg, s.maxRequestBytes())
	}

	// Nothing was stored, and the node still answers.
	rr, err := dkvpb.NewKVClient(conn).Range(context.Background(), &dkvpb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, CountOnly: true})
	if err != nil || rr.Count != 0 {
		t.Fatalf("after refused puts: count %d, err %v; want 0 keys", rr.GetCount(), err)
	}
}

type repeatReader byte

func (r repeatReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestHTTPBytesFieldsMustBeBase64: a bytes field
// that is not standard base64 with padding is refused with 400 naming the
// field, in any request and at any depth, instead of being decoded into
// other bytes.
func TestHTTPBytesFieldsMustBeBase64(t *testing.T) {
	_, base, conn := startHTTPTestServer(t, Config{})
	for _, tc := range []struct{ path, body, field string }{
		{"/v1/kv/put", `{"key":"key","value":"dmFs"}`, `"key"`},
		{"/v1/kv/put", `{"key":"a2V5","value":"val"}`, `"value"`},
		{"/v1/kv/put", `{"key":"a2V5eQ","value":"dmFs"}`, `"key"`},        // unpadded
		{"/v1/kv/put", `{"key":"-_-_","value":"dmFs"}`, `"key"`},          // URL-safe alphabet
		{"/v1/kv/range", `{"key":"a2V5","rangeEnd":"end"}`, `"rangeEnd"`}, // JSON name
		{"/v1/kv/txn", `{"success":[{"request_put":{"key":"a2V5","value":"dmFs"}},{"request_put":{"key":"bad","value":"dmFs"}}]}`, `"success[1].request_put.key"`},
		{"/v1/kv/txn", `{"compare":[{"key":"k","value":"dmFs"}]}`, `"compare[0].key"`},
		{"/v1/lock/acquire", `{"key":"lock","ttl_ms":1000}`, ""}, // "lock" is valid base64: accepted, see below
		{"/v1/lock/acquire", `{"key":"mylock","ttl_ms":1000}`, `"key"`},
	} {
		code, msg := post(t, base+tc.path, strings.NewReader(tc.body))
		if tc.field == "" {
			continue
		}
		if code != http.StatusBadRequest || !strings.Contains(msg, "field "+strings.ReplaceAll(tc.field, `"`, `\"`)) || !strings.Contains(msg, "base64") {
			t.Errorf("POST %s %s: %d %s, want 400 naming field %s", tc.path, tc.body, code, msg, tc.field)
		}
	}
	// Nothing but the lock's key was written.
	rr, err := dkvpb.NewKVClient(conn).Range(context.Background(), &dkvpb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range rr.Kvs {
		if !bytes.HasPrefix(kv.Key, must(base64.StdEncoding.DecodeString("lock"))) {
			t.Errorf("refused request stored key %q", kv.Key)
		}
	}

	// Standard base64 works: "a2V5" is the key "key".
	if code, msg := post(t, base+"/v1/kv/put", strings.NewReader(`{"key":"a2V5","value":"dmFs"}`)); code != http.StatusOK {
		t.Fatalf("valid put: %d %s", code, msg)
	}
	resp, err := http.Get(base + "/v1/keys/key")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "val" {
		t.Fatalf("GET /v1/keys/key after a base64 put: %d %q, want 200 \"val\"", resp.StatusCode, b)
	}
}

// TestHTTPWatchPostMalformedAnswers400: POST
// /v1/watch with malformed JSON, an empty body or a first request that
// creates no watch answers 400 at once instead of never answering.
func TestHTTPWatchPostMalformedAnswers400(t *testing.T) {
	_, base, _ := startHTTPTestServer(t, Config{})
	for _, body := range []string{
		`{"create_request": {`,
		`not json`,
		``,
		`{"create_request":{"key":"key"}}`,
		`{"progress_request":{}}`,
	} {
		code, msg := post(t, base+"/v1/watch", strings.NewReader(body))
		if code != http.StatusBadRequest {
			t.Errorf("POST /v1/watch %q: %d %s, want 400", body, code, msg)
		}
	}
	// A valid stream still works: the created response arrives.
	c := &http.Client{Timeout: 10 * time.Second}
	pr, pw := io.Pipe()
	defer pw.Close()
	go pw.Write([]byte(`{"create_request":{"key":"a2V5"}}`))
	resp, err := c.Post(base+"/v1/watch", "application/json", pr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var first struct {
		Result struct {
			Created bool `json:"created"`
		} `json:"result"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&first); err != nil || resp.StatusCode != 200 || !first.Result.Created {
		t.Fatalf("valid watch: status %d, first %+v, err %v", resp.StatusCode, first, err)
	}
}

func putKey(t *testing.T, kv dkvpb.KVClient, key, val string) int64 {
	t.Helper()
	resp, err := kv.Put(context.Background(), &dkvpb.PutRequest{Key: []byte(key), Value: []byte(val)})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// createWatch opens a stream with one watch and returns it with its first
// response.
func createWatch(t *testing.T, conn *grpc.ClientConn, req *dkvpb.WatchCreateRequest) (dkvpb.Watch_WatchClient, *dkvpb.WatchResponse) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	st, err := dkvpb.NewWatchClient(conn).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&dkvpb.WatchRequest{RequestUnion: &dkvpb.WatchRequest_CreateRequest{CreateRequest: req}}); err != nil {
		t.Fatal(err)
	}
	first, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return st, first
}

// TestWatchFutureRevisionReportsStoreRevision: the
// created response of a watch from a future revision carries the store's
// revision, and events still start at the requested revision.
func TestWatchFutureRevisionReportsStoreRevision(t *testing.T) {
	_, _, conn := startHTTPTestServer(t, Config{})
	kv := dkvpb.NewKVClient(conn)
	cur := putKey(t, kv, "f", "0")
	start := cur + 3
	st, first := createWatch(t, conn, &dkvpb.WatchCreateRequest{Key: []byte("f"), StartRevision: start})
	if !first.Created || first.Canceled || first.Header.GetRevision() != cur {
		t.Fatalf("created response %v: want created at the store's revision %d (the watch starts at %d)", first, cur, start)
	}
	for i := 1; i <= 3; i++ {
		putKey(t, kv, "f", fmt.Sprint(i))
	}
	r, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Events) == 0 || r.Events[0].Kv.ModRevision != start {
		t.Fatalf("first events %v, want the put at revision %d first", r.Events, start)
	}
}

// TestWatchAtCompactRevision: the compact revision
// can be watched, as it can be read (etcd's rule); only prev_kv, which
// needs the versions before it, is refused there; before it is Compacted.
func TestWatchAtCompactRevision(t *testing.T) {
	s, _, conn := startHTTPTestServer(t, Config{})
	kv := dkvpb.NewKVClient(conn)
	putKey(t, kv, "c/a", "1")
	comp := putKey(t, kv, "c/b", "1")
	if _, err := kv.DeleteRange(context.Background(), &dkvpb.DeleteRangeRequest{Key: []byte("c/a")}); err != nil {
		t.Fatal(err)
	}
	after := putKey(t, kv, "c/b", "2")
	if _, err := kv.Compact(context.Background(), &dkvpb.CompactRequest{Revision: comp}); err != nil {
		t.Fatal(err)
	}
	if err := s.kv.PurgeHistory(s.store.DB(), comp); err != nil {
		t.Fatal(err)
	}
	if rr, err := kv.Range(context.Background(), &dkvpb.RangeRequest{Key: []byte("c/b"), Revision: comp}); err != nil || len(rr.Kvs) != 1 {
		t.Fatalf("read at the compact revision %d: %v, %v", comp, rr, err)
	}
	st, first := createWatch(t, conn, &dkvpb.WatchCreateRequest{Key: []byte("c/"), Prefix: true, StartRevision: comp})
	if first.Canceled {
		t.Fatalf("watch at the compact revision %d refused: %s %s", comp, first.CancelStatus, first.CancelReason)
	}
	var got []string
	for len(got) < 3 {
		r, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range r.Events {
			got = append(got, fmt.Sprintf("%s %s@%d", e.Type, e.Kv.Key, e.Kv.ModRevision))
		}
	}
	want := []string{fmt.Sprintf("PUT c/b@%d", comp), fmt.Sprintf("DELETE c/a@%d", comp+1), fmt.Sprintf("PUT c/b@%d", after)}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events from the compact revision: %v, want %v", got, want)
	}

	_, first = createWatch(t, conn, &dkvpb.WatchCreateRequest{Key: []byte("c/b"), StartRevision: comp, PrevKv: true})
	if !first.Canceled || first.CancelStatus != "COMPACTED" || first.CompactRevision != comp || !strings.Contains(first.CancelReason, "prev_kv") {
		t.Fatalf("prev_kv watch at the compact revision: %v, want COMPACTED explaining prev_kv", first)
	}
	_, first = createWatch(t, conn, &dkvpb.WatchCreateRequest{Key: []byte("c/b"), StartRevision: comp - 1})
	if !first.Canceled || first.CancelStatus != "COMPACTED" || first.CompactRevision != comp {
		t.Fatalf("watch before the compact revision: %v, want COMPACTED", first)
	}
}

// TestRangeReplyOverMessageLimit: a range whose
// reply would exceed the gRPC message limit is refused as InvalidInput
// naming the limit and how to page, not with the transport's
// ResourceExhausted.
func TestRangeReplyOverMessageLimit(t *testing.T) {
	const val = 4 << 20
	_, _, conn := startHTTPTestServer(t, Config{MaxValueBytes: val})
	kv := dkvpb.NewKVClient(conn)
	v := bytes.Repeat([]byte{'r'}, val)
	for i := 0; i < maxSendMsgBytes/val+1; i++ {
		if _, err := kv.Put(context.Background(), &dkvpb.PutRequest{Key: []byte(fmt.Sprintf("big/%02d", i)), Value: v}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := kv.Range(context.Background(), &dkvpb.RangeRequest{Key: []byte("big/"), Prefix: true})
	st, _ := status.FromError(err)
	if dkverr.CodeOf(err) != dkverr.InvalidInput || !strings.Contains(st.Message(), fmt.Sprint(maxSendMsgBytes)) || !strings.Contains(st.Message(), "limit") {
		t.Fatalf("range over the message limit: code %v, %v; want InvalidInput naming the limit %d and --limit", st.Code(), err, maxSendMsgBytes)
	}
	// Paging works.
	rr, err := kv.Range(context.Background(), &dkvpb.RangeRequest{Key: []byte("big/"), Prefix: true, Limit: 8})
	if err != nil || len(rr.Kvs) != 8 || !rr.More {
		t.Fatalf("a page of 8: %d keys, more %v, err %v", len(rr.GetKvs()), rr.GetMore(), err)
	}
	if st.Code() == codes.ResourceExhausted || errors.Is(err, context.DeadlineExceeded) {
		t.Fatal("unreachable")
	}
}

// TestConnBudget: the client connection limit fits
// below RLIMIT_NOFILE with the reserve kept, and a limit that cannot be
// honoured is refused with the numbers and the fix.
func TestConnBudget(t *testing.T) {
	for _, tc := range []struct {
		soft       uint64
		configured int
		want       int
		lowered    bool
		errHas     string
	}{
		{1 << 20, 0, DefaultMaxConnections, false, ""},
		{1 << 20, 100000, 100000, false, ""},
		{^uint64(0), 0, DefaultMaxConnections, false, ""}, // unlimited
		{1500, 0, 1500 - reservedFDs, true, ""},
		{1500, 200, 200, false, ""},
		{1500, 1000, 0, false, "--max-connections 1000 is too high"},
		{1024, 0, 0, false, "raise the limit to at least 1240"},
	} {
		n, lowered, err := connBudget(tc.soft, tc.soft, tc.configured)
		switch {
		case tc.errHas != "":
			if err == nil || !strings.Contains(err.Error(), tc.errHas) || !strings.Contains(err.Error(), "RLIMIT_NOFILE") {
				t.Errorf("soft %d, configured %d: %d, %v; want an error with %q", tc.soft, tc.configured, n, err, tc.errHas)
			}
		case err != nil || n != tc.want || lowered != tc.lowered:
			t.Errorf("soft %d, configured %d: %d (lowered %v), %v; want %d (lowered %v)", tc.soft, tc.configured, n, lowered, err, tc.want, tc.lowered)
		}
	}
}

// FuzzCheckBytesFields: the gateway's base64 pre-check never panics, and
// whatever it accepts for a PutRequest is standard base64 in every bytes
// field protojson then decodes.
func FuzzCheckBytesFields(f *testing.F) {
	for _, s := range []string{`{"key":"a2V5","value":"dmFs"}`, `{"key":"key"}`, `{"key":null}`, `{"key":1}`, `[]`, `{`,
		`{"success":[{"request_put":{"key":"a2V5"}}],"compare":[{"key":"x"}]}`, `{"lock":{"key":"a2V5"}}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		for _, m := range []interface {
			ProtoReflect() protoreflect.Message
		}{&dkvpb.TxnRequest{}, &dkvpb.WatchRequest{}, &dkvpb.LockAcquireRequest{}} {
			_ = checkBytesFields(m.ProtoReflect().Descriptor(), []byte(body)) // must not panic
		}
		var put dkvpb.PutRequest
		if decodeStrict([]byte(body), &put) != nil {
			return
		}
		var raw map[string]any
		if json.Unmarshal([]byte(body), &raw) == nil {
			for _, f := range []string{"key", "value"} {
				if k, ok := raw[f].(string); ok {
					if _, err := base64.StdEncoding.Strict().DecodeString(k); err != nil {
						t.Fatalf("accepted %s %q that is not standard base64", f, k)
					}
				}
			}
		}
	})
}
