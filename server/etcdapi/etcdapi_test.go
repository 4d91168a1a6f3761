package etcdapi_test

import (
	"context"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// node is one started DKV node and an in-process connection to it,
// through which both APIs are reached.
type node struct {
	s    *server.Server
	conn *grpc.ClientConn
	kv   etcdserverpb.KVClient
	w    etcdserverpb.WatchClient
	l    etcdserverpb.LeaseClient
	dkv  dkvpb.KVClient
}

func startNode(t *testing.T) *node { return startNodeB(t) }

func startNodeB(t testing.TB) *node { return startNodeWith(t, nil) }

// startNodeWith is startNode with the config changed by edit (nil: none).
func startNodeWith(t testing.TB, edit func(*server.Config)) *node {
	t.Helper()
	opts := []servertest.Option{servertest.WithClientPort(), servertest.WithHTTPPort()}
	if edit != nil {
		opts = append(opts, servertest.WithConfig(edit))
	}
	n := servertest.Start(t, opts...)
	conn := n.Conn
	return &node{s: n.Srv, conn: conn,
		kv: etcdserverpb.NewKVClient(conn), w: etcdserverpb.NewWatchClient(conn), l: etcdserverpb.NewLeaseClient(conn),
		dkv: n.KV}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestProtoRegistration: etcd's generated files and DKV's register side
// by side in one program (etcd#19682 was a clash of bare file names), and
// one server serves both APIs.
func TestProtoRegistration(t *testing.T) {
	// etcd's mvccpb registers as the bare "kv.proto"; DKV's own kv.proto
	// registers as "dkv/v1/kv.proto", so the two do not collide.
	for path, pkg := range map[string]protoreflect.FullName{
		"rpc.proto": "etcdserverpb", "kv.proto": "mvccpb",
		"dkv/v1/kv.proto": "dkv.v1", "dkv/v1/watch.proto": "dkv.v1", "dkv/v1/lease.proto": "dkv.v1",
	} {
		fd, err := protoregistry.GlobalFiles.FindFileByPath(path)
		if err != nil {
			t.Errorf("file %s not registered: %v", path, err)
			continue
		}
		if fd.Package() != pkg {
			t.Errorf("file %s is package %s, want %s", path, fd.Package(), pkg)
		}
	}
	for _, name := range []protoreflect.FullName{"etcdserverpb.KV", "etcdserverpb.Watch", "etcdserverpb.Lease", "mvccpb.KeyValue", "dkv.v1.KV", "dkv.v1.KeyValue"} {
		if _, err := protoregistry.GlobalFiles.FindDescriptorByName(name); err != nil {
			t.Errorf("%s not registered: %v", name, err)
		}
	}
	n := startNode(t)
	ctx := ctxT(t)
	if _, err := n.kv.Put(ctx, &etcdserverpb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatalf("etcd Put: %v", err)
	}
	got, err := n.dkv.Range(ctx, &dkvpb.RangeRequest{Key: []byte("k")})
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v" {
		t.Fatalf("dkv Range after etcd Put: %v, %v", got, err)
	}
}
