package etcdapi_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/metadata"
)

// TestAuth: with auth enabled, an etcd call needs exactly what the DKV
// call it becomes needs, and refusals are etcd's errors.
func TestAuth(t *testing.T) {
	n := startNode(t)
	ctx := ctxT(t)
	a := dkvpb.NewAuthClient(n.conn)
	steps := []func() error{
		func() error {
			_, err := a.UserAdd(ctx, &dkvpb.UserAddRequest{Name: "root", Password: "rootpw"})
			return err
		},
		func() error {
			_, err := a.UserGrantRole(ctx, &dkvpb.UserRoleRequest{User: "root", Role: "root"})
			return err
		},
		func() error {
			_, err := a.UserAdd(ctx, &dkvpb.UserAddRequest{Name: "alice", Password: "alicepw"})
			return err
		},
		func() error { _, err := a.RoleAdd(ctx, &dkvpb.RoleRequest{Name: "app"}); return err },
		func() error {
			_, err := a.RoleGrantPermission(ctx, &dkvpb.RoleGrantPermissionRequest{Role: "app", Prefix: true,
				Permission: &dkvpb.Permission{Type: dkvpb.Permission_READWRITE, Key: []byte("app/")}})
			return err
		},
		func() error {
			_, err := a.UserGrantRole(ctx, &dkvpb.UserRoleRequest{User: "alice", Role: "app"})
			return err
		},
		func() error { _, err := a.AuthEnable(ctx, &dkvpb.AuthEnableRequest{}); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("auth set-up step %d: %v", i, err)
		}
	}
	tok, err := a.Authenticate(ctx, &dkvpb.AuthenticateRequest{Name: "alice", Password: "alicepw"})
	if err != nil {
		t.Fatal(err)
	}
	// etcd clients send the token as metadata "token".
	alice := metadata.AppendToOutgoingContext(ctx, "token", tok.Token)

	_, err = n.kv.Range(ctx, &etcdserverpb.RangeRequest{Key: []byte("app/a")})
	isErr(t, err, rpctypes.ErrGRPCUserEmpty)
	_, err = n.kv.Range(metadata.AppendToOutgoingContext(ctx, "token", "garbage"), &etcdserverpb.RangeRequest{Key: []byte("app/a")})
	isErr(t, err, rpctypes.ErrGRPCInvalidAuthToken)

	if _, err := n.kv.Put(alice, &etcdserverpb.PutRequest{Key: []byte("app/a"), Value: []byte("1")}); err != nil {
		t.Fatalf("alice put in app/: %v", err)
	}
	if r, err := n.kv.Range(alice, &etcdserverpb.RangeRequest{Key: []byte("app/"), RangeEnd: []byte("app0")}); err != nil || len(r.Kvs) != 1 {
		t.Fatalf("alice range over app/: %v %v", r, err)
	}
	for name, call := range map[string]func(context.Context) error{
		"range other/": func(ctx context.Context) error {
			_, err := n.kv.Range(ctx, &etcdserverpb.RangeRequest{Key: []byte("other/x")})
			return err
		},
		"serializable range other/": func(ctx context.Context) error {
			_, err := n.kv.Range(ctx, &etcdserverpb.RangeRequest{Key: []byte("other/x"), Serializable: true})
			return err
		},
		"put other/": func(ctx context.Context) error {
			_, err := n.kv.Put(ctx, &etcdserverpb.PutRequest{Key: []byte("other/x")})
			return err
		},
		"nested txn put other/": func(ctx context.Context) error {
			_, err := n.kv.Txn(ctx, &etcdserverpb.TxnRequest{Success: []*etcdserverpb.RequestOp{
				putOp("app/b", "1"), txnOp(&etcdserverpb.TxnRequest{Failure: []*etcdserverpb.RequestOp{putOp("other/x", "1")}})}})
			return err
		},
		"txn range compare leaving app/": func(ctx context.Context) error {
			_, err := n.kv.Txn(ctx, &etcdserverpb.TxnRequest{Compare: []*etcdserverpb.Compare{{Key: []byte("app/"), RangeEnd: []byte("b"), Target: etcdserverpb.Compare_VERSION}}})
			return err
		},
		"compact": func(ctx context.Context) error {
			_, err := n.kv.Compact(ctx, &etcdserverpb.CompactionRequest{Revision: 1})
			return err
		},
	} {
		if err := call(alice); err == nil || rpctypes.ErrorDesc(err) != rpctypes.ErrorDesc(rpctypes.ErrGRPCPermissionDenied) {
			t.Errorf("%s as alice: %v, want %v", name, err, rpctypes.ErrGRPCPermissionDenied)
		}
	}

	// A watch over a range alice may not read is created canceled.
	ws, err := n.w.Watch(alice)
	if err != nil {
		t.Fatal(err)
	}
	if err := ws.Send(createReq(&etcdserverpb.WatchCreateRequest{Key: []byte("other/")})); err != nil {
		t.Fatal(err)
	}
	r, err := ws.Recv()
	if err != nil || !r.Created || !r.Canceled || r.CancelReason != rpctypes.ErrorDesc(rpctypes.ErrGRPCPermissionDenied) {
		t.Fatalf("watch of other/: %v %v", r, err)
	}
	// The HTTP gateway takes the token in Authorization, as etcd's does.
	for _, tc := range []struct {
		token, want string
	}{
		{"", "etcdserver: user name is empty"},
		{tok.Token, `"count":"1"`},
	} {
		hr, err := http.NewRequest("POST", "http://"+n.s.HTTPAddr()+"/v3/kv/range", strings.NewReader(`{"key":"YXBwL2E="}`))
		if err != nil {
			t.Fatal(err)
		}
		hr.Header.Set("Content-Type", "application/json")
		if tc.token != "" {
			hr.Header.Set("Authorization", tc.token)
		}
		resp, err := http.DefaultClient.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(strings.ReplaceAll(string(body), " ", ""), strings.ReplaceAll(tc.want, " ", "")) {
			t.Errorf("gateway range with token %q: %d %s, want %s", tc.token, resp.StatusCode, body, tc.want)
		}
	}

	// An unauthenticated watch stream is refused when it opens.
	ws, err = n.w.Watch(ctx)
	if err == nil {
		_, err = ws.Recv()
	}
	isErr(t, err, rpctypes.ErrGRPCUserEmpty)
}
