package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/queuekeys"
	"github.com/dkv-io/dkv/internal/ratelimit"
	"github.com/dkv-io/dkv/internal/storekeys"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// The paths a keyed call reaches the server by.
// Each names store b its own way: gRPC metadata dkv-store, ?store=b on
// HTTP.
const (
	pathDKV      = "dkv-grpc"  // DKV's gRPC API
	pathEtcd     = "etcd-grpc" // etcd's gRPC API, v3lock and v3election included
	pathEtcdJSON = "etcd-json" // etcd's JSON gateway, /v3/...
	pathV1JSON   = "v1-json"   // DKV's JSON gateway and handlers, /v1/...
	pathV1Keys   = "v1-keys"   // the plain-value /v1/keys/KEY
)

// routeEnv is one server with store b, and the ways to reach it.
type routeEnv struct {
	s    *Server
	base string
	conn *grpc.ClientConn
	ctx  context.Context // bounds the whole test
	inB  context.Context // ctx naming store b in outgoing metadata
	kv   dkvpb.KVClient
}

// routeProbe runs a method in store b over one path, on a key of its
// own, and checks where the key landed (or what was read).
type routeProbe struct {
	path string
	run  func(t *testing.T, e *routeEnv, key string)
}

// routeRow is one gRPC method: either the probes that run it in store b,
// or why it takes no key.
type routeRow struct {
	noKey  string
	probes []routeProbe
}

// TestStoreRoutingEveryMethod runs every registered gRPC method that
// takes a key in store b, over every path that serves it, and checks
// that its key lands in (or is read from) store b and not the default
// store. The table must name every registered method: a new method
// without a row fails the test.
func TestStoreRoutingEveryMethod(t *testing.T) {
	s, base, conn := startHTTPTestServer(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := dkvpb.NewStoreClient(conn).Create(ctx, &dkvpb.StoreCreateRequest{Name: "b"}); err != nil {
		t.Fatal(err)
	}
	e := &routeEnv{s: s, base: base, conn: conn, ctx: ctx,
		inB: metadata.AppendToOutgoingContext(ctx, storeHeader, "b"), kv: dkvpb.NewKVClient(conn)}

	table := routingTable()
	var methods []string
	for svc, info := range s.grpcSrv.GetServiceInfo() {
		for _, m := range info.Methods {
			methods = append(methods, "/"+svc+"/"+m.Name)
		}
	}
	sort.Strings(methods)
	registered := map[string]bool{}
	n := 0
	for _, m := range methods {
		registered[m] = true
		row, ok := table[m]
		if !ok {
			t.Errorf("%s has no row in routingTable: add its store-routing probes (or why it takes no key)", m)
			continue
		}
		if row.noKey != "" {
			continue
		}
		paths := map[string]bool{}
		for _, p := range row.probes {
			paths[p.path] = true
		}
		for _, want := range wantPaths(m) {
			if !paths[want] {
				t.Errorf("%s takes a key but has no %s probe", m, want)
			}
		}
		for _, p := range row.probes {
			n++
			key := fmt.Sprintf("rk%03d", n)
			t.Run(strings.TrimPrefix(m, "/")+"/"+p.path, func(t *testing.T) { p.run(t, e, key) })
		}
	}
	for m := range table {
		if !registered[m] {
			t.Errorf("routingTable has a row for %s, which is not registered", m)
		}
	}

	// The listings of locks and rate limiters serve the store named.
	t.Run("v1-locks-list", func(t *testing.T) {
		e.acquire(t, e.inB, "listed-lock", "in-b")
		e.acquire(t, ctx, "listed-lock", "in-default")
		var got lockListResponse
		e.getJSON(t, "/v1/locks?store=b&prefix=listed-", &got)
		if len(got.Locks) != 1 || got.Locks[0].Key != "listed-lock" || got.Locks[0].Owner != "in-b" {
			t.Fatalf("GET /v1/locks?store=b: %+v, want store b's lock listed-lock held by in-b", got.Locks)
		}
	})
	t.Run("v1-ratelimits-list", func(t *testing.T) {
		if _, err := dkvpb.NewRateLimitClient(conn).Allow(e.inB, rateReq("listed-rl")); err != nil {
			t.Fatal(err)
		}
		var got rateLimitListResponse
		e.getJSON(t, "/v1/ratelimits?store=b&prefix=listed-", &got)
		if len(got.Buckets) != 1 || got.Buckets[0].Key != "listed-rl" {
			t.Fatalf("GET /v1/ratelimits?store=b: %+v, want store b's bucket listed-rl", got.Buckets)
		}
		e.getJSON(t, "/v1/ratelimits?prefix=listed-", &got)
		if len(got.Buckets) != 0 {
			t.Fatalf("GET /v1/ratelimits in the default store: %+v, want none (listed-rl is b's)", got.Buckets)
		}
	})
}

// wantPaths are the paths a keyed method must be probed over.
func wantPaths(method string) []string {
	switch {
	case strings.HasPrefix(method, "/dkv.v1.KV/") && method != dkvpb.KV_Txn_FullMethodName && method != dkvpb.KV_Counter_FullMethodName:
		return []string{pathDKV, pathV1JSON, pathV1Keys}
	case strings.HasPrefix(method, "/dkv.v1."):
		return []string{pathDKV, pathV1JSON}
	default:
		return []string{pathEtcd, pathEtcdJSON}
	}
}

func routingTable() map[string]routeRow {
	const (
		noKeyLease = "names a lease, not a key; keys in its replies are filtered to the call's store (storekeys.Response)"
		noKeyStore = "names the store it acts on in its request"
		noKeyAuth  = "a permission names its own store in the request"
		noKeyAdmin = "cluster-wide: names no key"
	)
	rows := map[string]routeRow{
		// DKV KV
		dkvpb.KV_Range_FullMethodName: {probes: []routeProbe{
			{pathDKV, readProbe(func(t *testing.T, e *routeEnv, key string) string {
				r, err := e.kv.Range(e.inB, &dkvpb.RangeRequest{Key: []byte(key)})
				noErr(t, err)
				return firstValue(r.Kvs)
			})},
			{pathV1JSON, readProbe(func(t *testing.T, e *routeEnv, key string) string {
				var r dkvpb.RangeResponse
				e.postV1(t, "/v1/kv/range", &dkvpb.RangeRequest{Key: []byte(key)}, &r)
				return firstValue(r.Kvs)
			})},
			{pathV1Keys, readProbe(func(t *testing.T, e *routeEnv, key string) string {
				return e.plain(t, "GET", key, "")
			})},
		}},
		dkvpb.KV_Put_FullMethodName: {probes: []routeProbe{
			{pathDKV, putProbe(func(t *testing.T, e *routeEnv, key string) {
				_, err := e.kv.Put(e.inB, &dkvpb.PutRequest{Key: []byte(key), Value: []byte("v")})
				noErr(t, err)
			})},
			{pathV1JSON, putProbe(func(t *testing.T, e *routeEnv, key string) {
				e.postV1(t, "/v1/kv/put", &dkvpb.PutRequest{Key: []byte(key), Value: []byte("v")}, &dkvpb.PutResponse{})
			})},
			{pathV1Keys, putProbe(func(t *testing.T, e *routeEnv, key string) {
				e.plain(t, "PUT", key, "v")
			})},
		}},
		dkvpb.KV_DeleteRange_FullMethodName: {probes: []routeProbe{
			{pathDKV, deleteProbe(func(t *testing.T, e *routeEnv, key string) {
				_, err := e.kv.DeleteRange(e.inB, &dkvpb.DeleteRangeRequest{Key: []byte(key)})
				noErr(t, err)
			})},
			{pathV1JSON, deleteProbe(func(t *testing.T, e *routeEnv, key string) {
				e.postV1(t, "/v1/kv/deleterange", &dkvpb.DeleteRangeRequest{Key: []byte(key)}, &dkvpb.DeleteRangeResponse{})
			})},
			{pathV1Keys, deleteProbe(func(t *testing.T, e *routeEnv, key string) {
				e.plain(t, "DELETE", key, "")
			})},
		}},
		dkvpb.KV_Txn_FullMethodName: {probes: []routeProbe{
			{pathDKV, putProbe(func(t *testing.T, e *routeEnv, key string) {
				_, err := e.kv.Txn(e.inB, txnPut(key))
				noErr(t, err)
			})},
			{pathV1JSON, putProbe(func(t *testing.T, e *routeEnv, key string) {
				e.postV1(t, "/v1/kv/txn", txnPut(key), &dkvpb.TxnResponse{})
			})},
		}},
		dkvpb.KV_Counter_FullMethodName: {probes: []routeProbe{
			{pathDKV, putProbe(func(t *testing.T, e *routeEnv, key string) {
				_, err := e.kv.Counter(e.inB, &dkvpb.CounterRequest{Key: []byte(key), Delta: 1})
				noErr(t, err)
			})},
			{pathV1JSON, putProbe(func(t *testing.T, e *routeEnv, key string) {
				e.postV1(t, "/v1/kv/counter", &dkvpb.CounterRequest{Key: []byte(key), Delta: 1}, &dkvpb.CounterResponse{})
			})},
		}},
		dkvpb.KV_Compact_FullMethodName:     {noKey: "compacts every store's history: names a revision, not a key"},
		dkvpb.KV_SessionOpen_FullMethodName: {noKey: "opens a client session, which is not in any store: names an id and a TTL"},

		// DKV Lock
		dkvpb.Lock_Acquire_FullMethodName: {probes: []routeProbe{
			{pathDKV, lockProbe(func(t *testing.T, e *routeEnv, key string) {
				_, err := dkvpb.NewLockClient(e.conn).Acquire(e.inB, lockReq(key, "o"))
				noErr(t, err)
			})},
			{pathV1JSON, lockProbe(func(t *testing.T, e *routeEnv, key string) {
				e.postV1(t, "/v1/lock/acquire", lockReq(key, "o"), &dkvpb.LockAcquireResponse{})
			})},
		}},
		dkvpb.Lock_Release_FullMethodName: {probes: []routeProbe{
			{pathDKV, unlockProbe(func(t *testing.T, e *routeEnv, h *dkvpb.LockHandle) {
				_, err := dkvpb.NewLockClient(e.conn).Release(e.inB, &dkvpb.LockReleaseRequest{Handle: h})
				noErr(t, err)
			})},
			{pathV1JSON, unlockProbe(func(t *testing.T, e *routeEnv, h *dkvpb.LockHandle) {
				e.postV1(t, "/v1/lock/release", &dkvpb.LockReleaseRequest{Handle: h}, &dkvpb.LockReleaseResponse{})
			})},
		}},
		dkvpb.Lock_Cancel_FullMethodName: {probes: []routeProbe{
			{pathDKV, unlockProbe(func(t *testing.T, e *routeEnv, h *dkvpb.LockHandle) {
				_, err := dkvpb.NewLockClient(e.conn).Cancel(e.inB, &dkvpb.LockCancelRequest{Key: h.Key, Owner: h.Owner})
				noErr(t, err)
			})},
			{pathV1JSON, unlockProbe(func(t *testing.T, e *routeEnv, h *dkvpb.LockHandle) {
				e.postV1(t, "/v1/lock/cancel", &dkvpb.LockCancelRequest{Key: h.Key, Owner: h.Owner}, &dkvpb.LockCancelResponse{})
			})},
		}},
		dkvpb.Lock_Describe_FullMethodName: {probes: []routeProbe{
			{pathDKV, describeProbe(func(t *testing.T, e *routeEnv, key string) string {
				r, err := dkvpb.NewLockClient(e.conn).Describe(e.inB, &dkvpb.LockDescribeRequest{Key: []byte(key)})
				noErr(t, err)
				return r.GetHolder().GetOwner()
			})},
			{pathV1JSON, describeProbe(func(t *testing.T, e *routeEnv, key string) string {
				var r dkvpb.LockDescribeResponse
				e.postV1(t, "/v1/lock/describe", &dkvpb.LockDescribeRequest{Key: []byte(key)}, &r)
				return r.GetHolder().GetOwner()
			})},
		}},

		// DKV RateLimit
		dkvpb.RateLimit_Allow_FullMethodName: {probes: []routeProbe{
			{pathDKV, rateProbe(func(t *testing.T, e *routeEnv, key string) {
				_, err := dkvpb.NewRateLimitClient(e.conn).Allow(e.inB, rateReq(key))
				noErr(t, err)
			})},
			{pathV1JSON, rateProbe(func(t *testing.T, e *routeEnv, key string) {
				e.postV1(t, "/v1/ratelimit/allow", rateReq(key), &dkvpb.RateLimitResponse{})
			})},
		}},

		// DKV Queue
		dkvpb.Queue_Claim_FullMethodName: {probes: []routeProbe{
			{pathDKV, claimProbe(func(t *testing.T, e *routeEnv, prefix string) string {
				r, err := dkvpb.NewQueueClient(e.conn).Claim(e.inB, claimReq(prefix))
				noErr(t, err)
				return string(r.GetKv().GetValue())
			})},
			{pathV1JSON, claimProbe(func(t *testing.T, e *routeEnv, prefix string) string {
				var r dkvpb.QueueClaimResponse
				e.postV1(t, "/v1/queue/claim", claimReq(prefix), &r)
				return string(r.GetKv().GetValue())
			})},
		}},
		dkvpb.Queue_Ack_FullMethodName: {probes: []routeProbe{
			{pathDKV, ackProbe(func(t *testing.T, e *routeEnv, a *dkvpb.QueueAckRequest) {
				_, err := dkvpb.NewQueueClient(e.conn).Ack(e.inB, a)
				noErr(t, err)
			})},
			{pathV1JSON, ackProbe(func(t *testing.T, e *routeEnv, a *dkvpb.QueueAckRequest) {
				e.postV1(t, "/v1/queue/ack", a, &dkvpb.QueueAckResponse{})
			})},
		}},
		dkvpb.Queue_AckBatch_FullMethodName: {probes: []routeProbe{
			{pathDKV, ackProbe(func(t *testing.T, e *routeEnv, a *dkvpb.QueueAckRequest) {
				r, err := dkvpb.NewQueueClient(e.conn).AckBatch(e.inB, &dkvpb.QueueAckBatchRequest{Acks: []*dkvpb.QueueAckRequest{a}})
				noErr(t, err)
				if !r.Results[0].GetOk() {
					t.Fatalf("ack batch: %+v", r.Results[0])
				}
			})},
			{pathV1JSON, ackProbe(func(t *testing.T, e *routeEnv, a *dkvpb.QueueAckRequest) {
				var r dkvpb.QueueAckBatchResponse
				e.postV1(t, "/v1/queue/ack-batch", &dkvpb.QueueAckBatchRequest{Acks: []*dkvpb.QueueAckRequest{a}}, &r)
				if len(r.Results) != 1 || !r.Results[0].GetOk() {
					t.Fatalf("ack batch: %+v", r.Results)
				}
			})},
		}},

		// DKV Watch
		dkvpb.Watch_Watch_FullMethodName: {probes: []routeProbe{
			{pathDKV, watchProbe(func(t *testing.T, e *routeEnv, key string, created func()) string {
				ctx, cancel := context.WithCancel(e.inB)
				defer cancel()
				ws, err := dkvpb.NewWatchClient(e.conn).Watch(ctx)
				noErr(t, err)
				noErr(t, ws.Send(&dkvpb.WatchRequest{RequestUnion: &dkvpb.WatchRequest_CreateRequest{CreateRequest: &dkvpb.WatchCreateRequest{Key: []byte(key)}}}))
				for {
					r, err := ws.Recv()
					noErr(t, err)
					if r.Created {
						created()
					}
					if len(r.Events) > 0 {
						return string(r.Events[0].GetKv().GetValue())
					}
				}
			})},
			{pathV1JSON, watchProbe(func(t *testing.T, e *routeEnv, key string, created func()) string {
				body, _ := protojson.Marshal(&dkvpb.WatchRequest{RequestUnion: &dkvpb.WatchRequest_CreateRequest{CreateRequest: &dkvpb.WatchCreateRequest{Key: []byte(key)}}})
				return e.streamJSON(t, "/v1/watch", body, created, func(line []byte) (string, bool, bool) {
					var r struct {
						Result json.RawMessage `json:"result"`
					}
					noErr(t, json.Unmarshal(line, &r))
					var w dkvpb.WatchResponse
					noErr(t, protojson.Unmarshal(r.Result, &w))
					if len(w.Events) > 0 {
						return string(w.Events[0].GetKv().GetValue()), w.Created, true
					}
					return "", w.Created, false
				})
			})},
			{pathV1JSON + "-get", watchProbe(func(t *testing.T, e *routeEnv, key string, created func()) string {
				return e.streamGet(t, "/v1/watch?store=b&key="+url.QueryEscape(key), created, func(line []byte) (string, bool, bool) {
					var w dkvpb.WatchResponse
					noErr(t, protojson.Unmarshal(line, &w))
					if len(w.Events) > 0 {
						return string(w.Events[0].GetKv().GetValue()), w.Created, true
					}
					return "", w.Created, false
				})
			})},
		}},

		// DKV Query: the query's prefix and the index's are keys of the call's store.
		dkvpb.Query_Query_FullMethodName: {probes: []routeProbe{
			{pathDKV, queryProbe(func(t *testing.T, e *routeEnv, key string) string {
				r, err := dkvpb.NewQueryClient(e.conn).Query(e.inB, &dkvpb.QueryRequest{Query: "prefix=" + key + " t=x"})
				noErr(t, err)
				return firstValue(r.GetKvs())
			})},
			{pathV1JSON, queryProbe(func(t *testing.T, e *routeEnv, key string) string {
				var r dkvpb.QueryResponse
				e.postV1(t, "/v1/query", &dkvpb.QueryRequest{Query: "prefix=" + key + " t=x"}, &r)
				return firstValue(r.GetKvs())
			})},
		}},
		dkvpb.Query_CreateIndex_FullMethodName: {probes: []routeProbe{
			{pathDKV, indexProbe(func(t *testing.T, e *routeEnv, key string) {
				_, err := dkvpb.NewQueryClient(e.conn).CreateIndex(e.inB, &dkvpb.IndexCreateRequest{Prefix: []byte(key), Label: "t"})
				noErr(t, err)
			})},
			{pathV1JSON, indexProbe(func(t *testing.T, e *routeEnv, key string) {
				e.postV1(t, "/v1/index/create", &dkvpb.IndexCreateRequest{Prefix: []byte(key), Label: "t"}, &dkvpb.IndexCreateResponse{})
			})},
		}},
		dkvpb.Query_DropIndex_FullMethodName: {probes: []routeProbe{
			{pathDKV, dropIndexProbe(func(t *testing.T, e *routeEnv, key string) {
				_, err := dkvpb.NewQueryClient(e.conn).DropIndex(e.inB, &dkvpb.IndexDropRequest{Prefix: []byte(key), Label: "t"})
				noErr(t, err)
			})},
			{pathV1JSON, dropIndexProbe(func(t *testing.T, e *routeEnv, key string) {
				e.postV1(t, "/v1/index/drop", &dkvpb.IndexDropRequest{Prefix: []byte(key), Label: "t"}, &dkvpb.IndexDropResponse{})
			})},
		}},
		dkvpb.Query_ListIndexes_FullMethodName: {noKey: "names no key; lists the call's store's indexes (the index probes read it)"},

		// etcd KV
		"/etcdserverpb.KV/Range": {probes: []routeProbe{
			{pathEtcd, readProbe(func(t *testing.T, e *routeEnv, key string) string {
				r, err := etcdserverpb.NewKVClient(e.conn).Range(e.inB, &etcdserverpb.RangeRequest{Key: []byte(key)})
				noErr(t, err)
				if len(r.Kvs) == 0 {
					return ""
				}
				return string(r.Kvs[0].Value)
			})},
			{pathEtcdJSON, readProbe(func(t *testing.T, e *routeEnv, key string) string {
				var r etcdserverpb.RangeResponse
				e.postV3(t, "/v3/kv/range", &etcdserverpb.RangeRequest{Key: []byte(key)}, &r)
				if len(r.Kvs) == 0 {
					return ""
				}
				return string(r.Kvs[0].Value)
			})},
		}},
		"/etcdserverpb.KV/Put": {probes: []routeProbe{
			{pathEtcd, putProbe(func(t *testing.T, e *routeEnv, key string) {
				_, err := etcdserverpb.NewKVClient(e.conn).Put(e.inB, &etcdserverpb.PutRequest{Key: []byte(key), Value: []byte("v")})
				noErr(t, err)
			})},
			{pathEtcdJSON, putProbe(func(t *testing.T, e *routeEnv, key string) {
				e.postV3(t, "/v3/kv/put", &etcdserverpb.PutRequest{Key: []byte(key), Value: []byte("v")}, &etcdserverpb.PutResponse{})
			})},
		}},
		"/etcdserverpb.KV/DeleteRange": {probes: []routeProbe{
			{pathEtcd, deleteProbe(func(t *testing.T, e *routeEnv, key string) {
				_, err := etcdserverpb.NewKVClient(e.conn).DeleteRange(e.inB, &etcdserverpb.DeleteRangeRequest{Key: []byte(key)})
				noErr(t, err)
			})},
			{pathEtcdJSON, deleteProbe(func(t *testing.T, e *routeEnv, key string) {
				e.postV3(t, "/v3/kv/deleterange", &etcdserverpb.DeleteRangeRequest{Key: []byte(key)}, &etcdserverpb.DeleteRangeResponse{})
			})},
		}},
		"/etcdserverpb.KV/Txn": {probes: []routeProbe{
			{pathEtcd, putProbe(func(t *testing.T, e *routeEnv, key string) {
				_, err := etcdserverpb.NewKVClient(e.conn).Txn(e.inB, etcdTxnPut(key))
				noErr(t, err)
			})},
			{pathEtcdJSON, putProbe(func(t *testing.T, e *routeEnv, key string) {
				e.postV3(t, "/v3/kv/txn", etcdTxnPut(key), &etcdserverpb.TxnResponse{})
			})},
		}},
		// etcd 3.7's streamed range: Range's reply in messages; no
		// gateway route, as etcd has none.
		"/etcdserverpb.KV/RangeStream": {probes: []routeProbe{
			{pathEtcd, readProbe(func(t *testing.T, e *routeEnv, key string) string {
				st, err := etcdserverpb.NewKVClient(e.conn).RangeStream(e.inB, &etcdserverpb.RangeRequest{Key: []byte(key)})
				noErr(t, err)
				var val string
				for {
					m, err := st.Recv()
					if errors.Is(err, io.EOF) {
						return val
					}
					noErr(t, err)
					if kvs := m.GetRangeResponse().GetKvs(); len(kvs) > 0 {
						val = string(kvs[0].Value)
					}
				}
			})},
			{pathEtcdJSON, func(t *testing.T, e *routeEnv, key string) {
				if code, b := e.do(t, "POST", inStoreB("/v3/kv/rangestream"), "application/json", []byte(`{}`)); code != http.StatusNotFound {
					t.Fatalf("POST /v3/kv/rangestream?store=b: %d %s, want 404 (no such route)", code, b)
				}
			}},
		}},
		"/etcdserverpb.KV/Compact": {noKey: "compacts every store's history: names a revision, not a key"},

		// etcd Watch
		"/etcdserverpb.Watch/Watch": {probes: []routeProbe{
			{pathEtcd, watchProbe(func(t *testing.T, e *routeEnv, key string, created func()) string {
				ctx, cancel := context.WithCancel(e.inB)
				defer cancel()
				ws, err := etcdserverpb.NewWatchClient(e.conn).Watch(ctx)
				noErr(t, err)
				noErr(t, ws.Send(&etcdserverpb.WatchRequest{RequestUnion: &etcdserverpb.WatchRequest_CreateRequest{CreateRequest: &etcdserverpb.WatchCreateRequest{Key: []byte(key)}}}))
				for {
					r, err := ws.Recv()
					noErr(t, err)
					if r.Created {
						created()
					}
					if len(r.Events) > 0 {
						return string(r.Events[0].Kv.Value)
					}
				}
			})},
			{pathEtcdJSON, watchProbe(func(t *testing.T, e *routeEnv, key string, created func()) string {
				body, _ := protojson.Marshal(&etcdserverpb.WatchRequest{RequestUnion: &etcdserverpb.WatchRequest_CreateRequest{CreateRequest: &etcdserverpb.WatchCreateRequest{Key: []byte(key)}}})
				return e.streamJSON(t, "/v3/watch", body, created, func(line []byte) (string, bool, bool) {
					var r struct {
						Result json.RawMessage `json:"result"`
					}
					noErr(t, json.Unmarshal(line, &r))
					var w etcdserverpb.WatchResponse
					noErr(t, (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(r.Result, &w))
					if len(w.Events) > 0 {
						return string(w.Events[0].Kv.Value), w.Created, true
					}
					return "", w.Created, false
				})
			})},
		}},

		// etcd v3lock
		"/v3lockpb.Lock/Lock": {probes: []routeProbe{
			{pathEtcd, landsProbe(func(t *testing.T, e *routeEnv, key string) string {
				r, err := v3lockpb.NewLockClient(e.conn).Lock(e.inB, &v3lockpb.LockRequest{Name: []byte(key), Lease: e.grant(t)})
				noErr(t, err)
				return string(r.Key)
			})},
			{pathEtcdJSON, landsProbe(func(t *testing.T, e *routeEnv, key string) string {
				var r v3lockpb.LockResponse
				e.postV3(t, "/v3/lock/lock", &v3lockpb.LockRequest{Name: []byte(key), Lease: e.grant(t)}, &r)
				return string(r.Key)
			})},
		}},
		"/v3lockpb.Lock/Unlock": {probes: []routeProbe{
			{pathEtcd, deleteProbe(func(t *testing.T, e *routeEnv, key string) {
				_, err := v3lockpb.NewLockClient(e.conn).Unlock(e.inB, &v3lockpb.UnlockRequest{Key: []byte(key)})
				noErr(t, err)
			})},
			{pathEtcdJSON, deleteProbe(func(t *testing.T, e *routeEnv, key string) {
				e.postV3(t, "/v3/lock/unlock", &v3lockpb.UnlockRequest{Key: []byte(key)}, &v3lockpb.UnlockResponse{})
			})},
		}},

		// etcd v3election
		"/v3electionpb.Election/Campaign": {probes: []routeProbe{
			{pathEtcd, landsProbe(func(t *testing.T, e *routeEnv, key string) string {
				r, err := v3electionpb.NewElectionClient(e.conn).Campaign(e.inB, &v3electionpb.CampaignRequest{Name: []byte(key), Lease: e.grant(t), Value: []byte("v")})
				noErr(t, err)
				return string(r.Leader.Key)
			})},
			{pathEtcdJSON, landsProbe(func(t *testing.T, e *routeEnv, key string) string {
				var r v3electionpb.CampaignResponse
				e.postV3(t, "/v3/election/campaign", &v3electionpb.CampaignRequest{Name: []byte(key), Lease: e.grant(t), Value: []byte("v")}, &r)
				return string(r.GetLeader().GetKey())
			})},
		}},
		"/v3electionpb.Election/Proclaim": {probes: []routeProbe{
			{pathEtcd, proclaimProbe(func(t *testing.T, e *routeEnv, l *v3electionpb.LeaderKey) {
				_, err := v3electionpb.NewElectionClient(e.conn).Proclaim(e.inB, &v3electionpb.ProclaimRequest{Leader: l, Value: []byte("proclaimed")})
				noErr(t, err)
			})},
			{pathEtcdJSON, proclaimProbe(func(t *testing.T, e *routeEnv, l *v3electionpb.LeaderKey) {
				e.postV3(t, "/v3/election/proclaim", &v3electionpb.ProclaimRequest{Leader: l, Value: []byte("proclaimed")}, &v3electionpb.ProclaimResponse{})
			})},
		}},
		"/v3electionpb.Election/Resign": {probes: []routeProbe{
			{pathEtcd, resignProbe(func(t *testing.T, e *routeEnv, l *v3electionpb.LeaderKey) {
				_, err := v3electionpb.NewElectionClient(e.conn).Resign(e.inB, &v3electionpb.ResignRequest{Leader: l})
				noErr(t, err)
			})},
			{pathEtcdJSON, resignProbe(func(t *testing.T, e *routeEnv, l *v3electionpb.LeaderKey) {
				e.postV3(t, "/v3/election/resign", &v3electionpb.ResignRequest{Leader: l}, &v3electionpb.ResignResponse{})
			})},
		}},
		"/v3electionpb.Election/Leader": {probes: []routeProbe{
			{pathEtcd, leaderProbe(func(t *testing.T, e *routeEnv, name string) string {
				r, err := v3electionpb.NewElectionClient(e.conn).Leader(e.inB, &v3electionpb.LeaderRequest{Name: []byte(name)})
				noErr(t, err)
				return string(r.GetKv().GetValue())
			})},
			{pathEtcdJSON, leaderProbe(func(t *testing.T, e *routeEnv, name string) string {
				var r v3electionpb.LeaderResponse
				e.postV3(t, "/v3/election/leader", &v3electionpb.LeaderRequest{Name: []byte(name)}, &r)
				return string(r.GetKv().GetValue())
			})},
		}},
		"/v3electionpb.Election/Observe": {probes: []routeProbe{
			{pathEtcd, leaderProbe(func(t *testing.T, e *routeEnv, name string) string {
				ctx, cancel := context.WithCancel(e.inB)
				defer cancel()
				st, err := v3electionpb.NewElectionClient(e.conn).Observe(ctx, &v3electionpb.LeaderRequest{Name: []byte(name)})
				noErr(t, err)
				r, err := st.Recv()
				noErr(t, err)
				return string(r.GetKv().GetValue())
			})},
			{pathEtcdJSON, leaderProbe(func(t *testing.T, e *routeEnv, name string) string {
				body, _ := protojson.Marshal(&v3electionpb.LeaderRequest{Name: []byte(name)})
				return e.streamJSON(t, "/v3/election/observe", body, func() {}, func(line []byte) (string, bool, bool) {
					var r struct {
						Result json.RawMessage `json:"result"`
					}
					noErr(t, json.Unmarshal(line, &r))
					var l v3electionpb.LeaderResponse
					noErr(t, (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(r.Result, &l))
					return string(l.GetKv().GetValue()), false, true
				})
			})},
		}},
	}
	for _, svc := range []struct {
		prefix, why string
	}{
		{"/dkv.v1.Lease/", noKeyLease}, {"/dkv.v1.Store/", noKeyStore}, {"/dkv.v1.Auth/", noKeyAuth},
		{"/dkv.v1.Cluster/", noKeyAdmin}, {"/dkv.v1.Maintenance/", noKeyAdmin},
		{"/etcdserverpb.Lease/", noKeyLease}, {"/etcdserverpb.Auth/", noKeyAuth},
		{"/etcdserverpb.Cluster/", noKeyAdmin}, {"/etcdserverpb.Maintenance/", noKeyAdmin},
	} {
		for _, m := range noKeyMethods[svc.prefix] {
			rows[svc.prefix+m] = routeRow{noKey: svc.why}
		}
	}
	return rows
}

// noKeyMethods are the methods of the services that take no key, by
// service. Listed one by one, so that a new method is a decision.
var noKeyMethods = map[string][]string{
	"/dkv.v1.Lease/":             {"Grant", "Revoke", "KeepAlive", "KeepAliveOnce", "TimeToLive", "Leases"},
	"/dkv.v1.Store/":             {"Create", "SetQuota", "Delete", "List", "Stats"},
	"/dkv.v1.Auth/":              {"Authenticate", "AuthEnable", "AuthDisable", "AuthStatus", "UserAdd", "UserDelete", "UserGet", "UserList", "UserChangePassword", "UserGrantRole", "UserRevokeRole", "RoleAdd", "RoleDelete", "RoleGet", "RoleList", "RoleGrantPermission", "RoleRevokePermission"},
	"/dkv.v1.Cluster/":           {"Status", "HashKV", "MemberList", "MemberAdd", "MemberPromote", "MemberRemove", "LeaderTransfer"},
	"/dkv.v1.Maintenance/":       {"Snapshot", "Alarm", "Defragment"},
	"/etcdserverpb.Lease/":       {"LeaseGrant", "LeaseRevoke", "LeaseKeepAlive", "LeaseTimeToLive", "LeaseLeases"},
	"/etcdserverpb.Auth/":        {"AuthEnable", "AuthDisable", "AuthStatus", "Authenticate", "UserAdd", "UserGet", "UserList", "UserDelete", "UserChangePassword", "UserGrantRole", "UserRevokeRole", "RoleAdd", "RoleGet", "RoleList", "RoleDelete", "RoleGrantPermission", "RoleRevokePermission"},
	"/etcdserverpb.Cluster/":     {"MemberAdd", "MemberRemove", "MemberUpdate", "MemberList", "MemberPromote"},
	"/etcdserverpb.Maintenance/": {"Alarm", "Status", "Defragment", "Hash", "HashKV", "Snapshot", "MoveLeader", "Downgrade"},
}

// --- what a probe checks ---

// putProbe: the call writes key; it must exist in store b only.
func putProbe(call func(*testing.T, *routeEnv, string)) func(*testing.T, *routeEnv, string) {
	return func(t *testing.T, e *routeEnv, key string) {
		call(t, e, key)
		e.landedInB(t, key)
	}
}

// landsProbe: the call writes the key it returns (a lock's or a
// candidate's, under key).
func landsProbe(call func(*testing.T, *routeEnv, string) string) func(*testing.T, *routeEnv, string) {
	return func(t *testing.T, e *routeEnv, key string) {
		got := call(t, e, key)
		if !strings.HasPrefix(got, key+"/") {
			t.Fatalf("the call returned key %q, want one under %q/", got, key)
		}
		e.landedInB(t, got)
	}
}

// readProbe: key holds "in-b" in store b and "in-default" in the
// default store; the call must read b's.
func readProbe(call func(*testing.T, *routeEnv, string) string) func(*testing.T, *routeEnv, string) {
	return func(t *testing.T, e *routeEnv, key string) {
		e.seed(t, key)
		if got := call(t, e, key); got != "in-b" {
			t.Fatalf("read %q in store b: got %q, want %q", key, got, "in-b")
		}
	}
}

// deleteProbe: key exists in both stores; the call deletes b's only.
func deleteProbe(call func(*testing.T, *routeEnv, string)) func(*testing.T, *routeEnv, string) {
	return func(t *testing.T, e *routeEnv, key string) {
		e.seed(t, key)
		call(t, e, key)
		if v, ok := e.get(t, e.inB, key); ok {
			t.Errorf("key %q is still in store b (%q) after the delete in store b", key, v)
		}
		if _, ok := e.get(t, e.ctx, key); !ok {
			t.Errorf("key %q is gone from the default store after a delete in store b", key)
		}
	}
}

// lockProbe: the call acquires key's lock; it must be held in b only.
func lockProbe(call func(*testing.T, *routeEnv, string)) func(*testing.T, *routeEnv, string) {
	return func(t *testing.T, e *routeEnv, key string) {
		call(t, e, key)
		if !e.held(t, e.inB, key) {
			t.Errorf("lock %q is not held in store b after an acquire in store b", key)
		}
		if e.held(t, e.ctx, key) {
			t.Errorf("lock %q is held in the default store after an acquire in store b", key)
		}
	}
}

// unlockProbe: key's lock is held in both stores (owner "o"); the call
// ends b's.
func unlockProbe(call func(*testing.T, *routeEnv, *dkvpb.LockHandle)) func(*testing.T, *routeEnv, string) {
	return func(t *testing.T, e *routeEnv, key string) {
		h := e.acquire(t, e.inB, key, "o")
		e.acquire(t, e.ctx, key, "o")
		call(t, e, h)
		if e.held(t, e.inB, key) {
			t.Errorf("lock %q is still held in store b", key)
		}
		if !e.held(t, e.ctx, key) {
			t.Errorf("lock %q was released in the default store by a call in store b", key)
		}
	}
}

// describeProbe: key's lock is held by "in-b" in b and by "in-default"
// in the default store; the call must describe b's.
func describeProbe(call func(*testing.T, *routeEnv, string) string) func(*testing.T, *routeEnv, string) {
	return func(t *testing.T, e *routeEnv, key string) {
		e.acquire(t, e.inB, key, "in-b")
		e.acquire(t, e.ctx, key, "in-default")
		if got := call(t, e, key); got != "in-b" {
			t.Fatalf("describe %q in store b: holder %q, want in-b", key, got)
		}
	}
}

// rateProbe: the call's bucket is store b's key.
func rateProbe(call func(*testing.T, *routeEnv, string)) func(*testing.T, *routeEnv, string) {
	return func(t *testing.T, e *routeEnv, key string) {
		call(t, e, key)
		b, _ := storekeys.For("b")
		inB, _ := b.Key([]byte(key))
		var got []string
		snap := e.s.store.DB().NewSnapshot()
		defer snap.Close()
		noErr(t, ratelimit.Each(snap, nil, func(k []byte, _ ratelimit.State) bool {
			if bytes.HasSuffix(k, []byte(key)) {
				got = append(got, string(k))
			}
			return true
		}))
		if len(got) != 1 || got[0] != string(inB) {
			t.Fatalf("rate limit buckets for %q: %q, want only store b's %q", key, got, inB)
		}
	}
}

// jobKey is a visible job of the queue under prefix (internal/queuekeys).
func jobKey(prefix string) string { return prefix + queuekeys.Jobs + jobOrder }

// jobOrder is the test job's <order>; its claim marker is P c/<order>.
var jobOrder = queuekeys.Order(0, 0, "0000000000000001deadbeef")

// claimProbe: queue key has a job in both stores; the claim
// must take b's.
func claimProbe(call func(*testing.T, *routeEnv, string) string) func(*testing.T, *routeEnv, string) {
	return func(t *testing.T, e *routeEnv, key string) {
		prefix := queuekeys.Prefix(key)
		e.seed(t, jobKey(prefix))
		if got := call(t, e, prefix); got != "in-b" {
			t.Fatalf("claim in store b: job %q, want in-b", got)
		}
	}
}

// ackProbe: a job of store b's queue is claimed; acking it deletes b's
// job, not the default store's.
func ackProbe(call func(*testing.T, *routeEnv, *dkvpb.QueueAckRequest)) func(*testing.T, *routeEnv, string) {
	return func(t *testing.T, e *routeEnv, key string) {
		prefix := queuekeys.Prefix(key)
		job := jobKey(prefix)
		e.seed(t, job)
		r, err := dkvpb.NewQueueClient(e.conn).Claim(e.inB, claimReq(prefix))
		noErr(t, err)
		if !r.Found {
			t.Fatal("setup: no job claimed in store b")
		}
		call(t, e, &dkvpb.QueueAckRequest{Handle: r.Handle, MarkerKey: []byte(prefix + queuekeys.Claims + jobOrder)})
		if _, ok := e.get(t, e.inB, job); ok {
			t.Errorf("job %q is still in store b after its ack", job)
		}
		if _, ok := e.get(t, e.ctx, job); !ok {
			t.Errorf("the default store's job %q is gone after an ack in store b", job)
		}
	}
}

// watchProbe: the call watches key in store b and returns the value of
// the first event; key is written in the default store, then in b, once
// the watch is created.
func watchProbe(call func(t *testing.T, e *routeEnv, key string, created func()) string) func(*testing.T, *routeEnv, string) {
	return func(t *testing.T, e *routeEnv, key string) {
		once := false
		created := func() {
			if once {
				return
			}
			once = true
			e.put(t, e.ctx, key, "in-default")
			e.put(t, e.inB, key, "in-b")
		}
		if got := call(t, e, key, created); got != "in-b" {
			t.Fatalf("watch %q in store b: first event %q, want in-b", key, got)
		}
	}
}

// queryProbe: key/1 is labeled t=x in both stores, each with an index;
// the query must find b's.
func queryProbe(call func(*testing.T, *routeEnv, string) string) func(*testing.T, *routeEnv, string) {
	return func(t *testing.T, e *routeEnv, key string) {
		q := dkvpb.NewQueryClient(e.conn)
		for _, c := range []struct {
			ctx context.Context
			v   string
		}{{e.inB, "in-b"}, {e.ctx, "in-default"}} {
			_, err := q.CreateIndex(c.ctx, &dkvpb.IndexCreateRequest{Prefix: []byte(key), Label: "t"})
			noErr(t, err)
			_, err = e.kv.Put(c.ctx, &dkvpb.PutRequest{Key: []byte(key + "/1"), Value: []byte(c.v), Labels: map[string]string{"t": "x"}})
			noErr(t, err)
		}
		if got := call(t, e, key); got != "in-b" {
			t.Fatalf("query in store b: %q, want in-b", got)
		}
	}
}

// indexes is whether the store of ctx has an index on key, label t.
func (e *routeEnv) indexed(t *testing.T, ctx context.Context, key string) bool {
	r, err := dkvpb.NewQueryClient(e.conn).ListIndexes(ctx, &dkvpb.ListIndexesRequest{})
	noErr(t, err)
	for _, ix := range r.Indexes {
		if string(ix.GetPrefix()) == key && ix.GetLabel() == "t" {
			return true
		}
	}
	return false
}

// indexProbe: the call creates an index on key; it must be b's.
func indexProbe(call func(*testing.T, *routeEnv, string)) func(*testing.T, *routeEnv, string) {
	return func(t *testing.T, e *routeEnv, key string) {
		call(t, e, key)
		if !e.indexed(t, e.inB, key) || e.indexed(t, e.ctx, key) {
			t.Fatalf("index on %q: in b %v, in default %v; want only in b", key, e.indexed(t, e.inB, key), e.indexed(t, e.ctx, key))
		}
	}
}

// dropIndexProbe: both stores index key; the call drops b's.
func dropIndexProbe(call func(*testing.T, *routeEnv, string)) func(*testing.T, *routeEnv, string) {
	return func(t *testing.T, e *routeEnv, key string) {
		for _, ctx := range []context.Context{e.inB, e.ctx} {
			_, err := dkvpb.NewQueryClient(e.conn).CreateIndex(ctx, &dkvpb.IndexCreateRequest{Prefix: []byte(key), Label: "t"})
			noErr(t, err)
		}
		call(t, e, key)
		if e.indexed(t, e.inB, key) || !e.indexed(t, e.ctx, key) {
			t.Fatalf("index on %q after a drop in b: in b %v, in default %v; want only in default", key, e.indexed(t, e.inB, key), e.indexed(t, e.ctx, key))
		}
	}
}

// leader is a campaign's leader key under name in the store of ctx, made
// directly (as Campaign does) so the probe does not rely on Campaign.
func (e *routeEnv) leader(t *testing.T, ctx context.Context, name, value string) *v3electionpb.LeaderKey {
	lease := e.grant(t)
	key := fmt.Sprintf("%s/%x", name, lease)
	r, err := e.kv.Put(ctx, &dkvpb.PutRequest{Key: []byte(key), Value: []byte(value), Lease: lease})
	noErr(t, err)
	return &v3electionpb.LeaderKey{Name: []byte(name), Key: []byte(key), Rev: r.Header.Revision, Lease: lease}
}

// proclaimProbe: b's leader proclaims a value; b's key gets it.
func proclaimProbe(call func(*testing.T, *routeEnv, *v3electionpb.LeaderKey)) func(*testing.T, *routeEnv, string) {
	return func(t *testing.T, e *routeEnv, name string) {
		l := e.leader(t, e.inB, name, "in-b")
		call(t, e, l)
		if v, _ := e.get(t, e.inB, string(l.Key)); v != "proclaimed" {
			t.Fatalf("store b's leader key after proclaim: %q, want proclaimed", v)
		}
		if _, ok := e.get(t, e.ctx, string(l.Key)); ok {
			t.Fatalf("proclaim in store b wrote the default store's %q", l.Key)
		}
	}
}

// resignProbe: b's leader resigns; b's key is deleted, the default
// store's same key stays.
func resignProbe(call func(*testing.T, *routeEnv, *v3electionpb.LeaderKey)) func(*testing.T, *routeEnv, string) {
	return func(t *testing.T, e *routeEnv, name string) {
		l := e.leader(t, e.inB, name, "in-b")
		// The default store's key of the same name: it has another
		// create revision, and must stay whatever the resign does.
		e.put(t, e.ctx, string(l.Key), "in-default")
		call(t, e, l)
		if _, ok := e.get(t, e.inB, string(l.Key)); ok {
			t.Errorf("store b's leader key %q is still there after resign", l.Key)
		}
		if _, ok := e.get(t, e.ctx, string(l.Key)); !ok {
			t.Errorf("the default store's %q is gone after a resign in store b", l.Key)
		}
	}
}

// leaderProbe: both stores have a leader under name; the call must see
// b's.
func leaderProbe(call func(*testing.T, *routeEnv, string) string) func(*testing.T, *routeEnv, string) {
	return func(t *testing.T, e *routeEnv, name string) {
		e.leader(t, e.inB, name, "in-b")
		e.leader(t, e.ctx, name, "in-default")
		if got := call(t, e, name); got != "in-b" {
			t.Fatalf("leader of %q in store b: %q, want in-b", name, got)
		}
	}
}

// --- requests ---

func txnPut(key string) *dkvpb.TxnRequest {
	return &dkvpb.TxnRequest{Success: []*dkvpb.RequestOp{{Request: &dkvpb.RequestOp_RequestPut{
		RequestPut: &dkvpb.PutRequest{Key: []byte(key), Value: []byte("v")}}}}}
}

func etcdTxnPut(key string) *etcdserverpb.TxnRequest {
	return &etcdserverpb.TxnRequest{Success: []*etcdserverpb.RequestOp{{Request: &etcdserverpb.RequestOp_RequestPut{
		RequestPut: &etcdserverpb.PutRequest{Key: []byte(key), Value: []byte("v")}}}}}
}

func lockReq(key, owner string) *dkvpb.LockAcquireRequest {
	return &dkvpb.LockAcquireRequest{Key: []byte(key), Owner: owner, TtlMs: 60_000}
}

func rateReq(key string) *dkvpb.RateLimitRequest {
	return &dkvpb.RateLimitRequest{Key: []byte(key), Limit: 10, PeriodMs: 1000, Burst: 10, N: 1}
}

func claimReq(prefix string) *dkvpb.QueueClaimRequest {
	return &dkvpb.QueueClaimRequest{QueuePrefix: []byte(prefix), Owner: "worker", TtlMs: 60_000}
}

// --- helpers ---

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func firstValue(kvs []*dkvpb.KeyValue) string {
	if len(kvs) == 0 {
		return ""
	}
	return string(kvs[0].Value)
}

func (e *routeEnv) put(t *testing.T, ctx context.Context, key, value string) {
	t.Helper()
	_, err := e.kv.Put(ctx, &dkvpb.PutRequest{Key: []byte(key), Value: []byte(value)})
	noErr(t, err)
}

func (e *routeEnv) get(t *testing.T, ctx context.Context, key string) (string, bool) {
	t.Helper()
	r, err := e.kv.Range(ctx, &dkvpb.RangeRequest{Key: []byte(key)})
	noErr(t, err)
	if len(r.Kvs) == 0 {
		return "", false
	}
	return string(r.Kvs[0].Value), true
}

// seed puts key with "in-b" in store b and "in-default" in the default
// store.
func (e *routeEnv) seed(t *testing.T, key string) {
	t.Helper()
	e.put(t, e.inB, key, "in-b")
	e.put(t, e.ctx, key, "in-default")
}

func (e *routeEnv) landedInB(t *testing.T, key string) {
	t.Helper()
	if _, ok := e.get(t, e.inB, key); !ok {
		t.Errorf("key %q is not in store b after a write in store b", key)
	}
	if _, ok := e.get(t, e.ctx, key); ok {
		t.Errorf("key %q landed in the default store after a write in store b", key)
	}
}

func (e *routeEnv) grant(t *testing.T) int64 {
	t.Helper()
	r, err := dkvpb.NewLeaseClient(e.conn).Grant(e.ctx, &dkvpb.LeaseGrantRequest{TtlMs: 60_000})
	noErr(t, err)
	return r.Id
}

func (e *routeEnv) acquire(t *testing.T, ctx context.Context, key, owner string) *dkvpb.LockHandle {
	t.Helper()
	r, err := dkvpb.NewLockClient(e.conn).Acquire(ctx, lockReq(key, owner))
	noErr(t, err)
	if !r.Acquired {
		t.Fatalf("setup: lock %q not acquired", key)
	}
	return r.Handle
}

func (e *routeEnv) held(t *testing.T, ctx context.Context, key string) bool {
	t.Helper()
	r, err := dkvpb.NewLockClient(e.conn).Describe(ctx, &dkvpb.LockDescribeRequest{Key: []byte(key)})
	noErr(t, err)
	return r.Held
}

// inStoreB is url with ?store=b added.
func inStoreB(path string) string {
	if strings.Contains(path, "?") {
		return path + "&store=b"
	}
	return path + "?store=b"
}

func (e *routeEnv) do(t *testing.T, method, path, contentType string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(e.ctx, method, e.base+path, bytes.NewReader(body))
	noErr(t, err)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	noErr(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	noErr(t, err)
	return resp.StatusCode, b
}

// postV1 posts req to DKV's JSON gateway in store b and decodes the
// reply into resp.
func (e *routeEnv) postV1(t *testing.T, path string, req, resp proto.Message) {
	t.Helper()
	body, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(req)
	noErr(t, err)
	code, b := e.do(t, "POST", inStoreB(path), "application/json", body)
	if code != 200 {
		t.Fatalf("POST %s?store=b: %d %s", path, code, b)
	}
	noErr(t, protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(b, resp))
}

// postV3 posts req to etcd's JSON gateway in store b.
func (e *routeEnv) postV3(t *testing.T, path string, req, resp proto.Message) {
	t.Helper()
	e.postV1(t, path, req, resp)
}

// plain calls /v1/keys/KEY?store=b and returns the body.
func (e *routeEnv) plain(t *testing.T, method, key, body string) string {
	t.Helper()
	code, b := e.do(t, method, inStoreB("/v1/keys/"+url.PathEscape(key)), "application/octet-stream", []byte(body))
	if code != 200 && !(method == "GET" && code == 404) {
		t.Fatalf("%s /v1/keys/%s?store=b: %d %s", method, key, code, b)
	}
	if code == 404 {
		return ""
	}
	return string(b)
}

func (e *routeEnv) getJSON(t *testing.T, path string, v any) {
	t.Helper()
	code, b := e.do(t, "GET", path, "", nil)
	if code != 200 {
		t.Fatalf("GET %s: %d %s", path, code, b)
	}
	noErr(t, json.Unmarshal(b, v))
}

// streamJSON posts body to a streaming gateway path in store b and
// reads newline-delimited messages: parse returns a message's result,
// whether it reports the watch created, and whether it is the one
// waited for.
func (e *routeEnv) streamJSON(t *testing.T, path string, body []byte, created func(), parse func([]byte) (string, bool, bool)) string {
	t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", e.base+inStoreB(path), bytes.NewReader(body))
	noErr(t, err)
	req.Header.Set("Content-Type", "application/json")
	return e.stream(t, req, created, parse)
}

func (e *routeEnv) streamGet(t *testing.T, path string, created func(), parse func([]byte) (string, bool, bool)) string {
	t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", e.base+path, nil)
	noErr(t, err)
	return e.stream(t, req, created, parse)
}

func (e *routeEnv) stream(t *testing.T, req *http.Request, created func(), parse func([]byte) (string, bool, bool)) string {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	noErr(t, err)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s %s: %d %s", req.Method, req.URL, resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		v, isCreated, done := parse(sc.Bytes())
		if isCreated {
			created()
		}
		if done {
			return v
		}
	}
	t.Fatalf("%s %s: the stream ended without the message waited for: %v", req.Method, req.URL, sc.Err())
	return ""
}
