package proxy_test

import (
	"context"
	"net"
	"sync"
	"testing"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/proxy"
	"github.com/dkv-io/dkv/internal/testutil"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// laggingMember is a member whose applied state is behind the cluster's:
// it answers serializable reads from its own state (value "old" at
// revision behind), and writes and linearizable reads with the cluster's
// (value "new" at revision ahead), as a follower does that forwards
// those. It records the linearizable reads it is asked.
type laggingMember struct {
	dkvpb.UnimplementedKVServer
	dkvpb.UnimplementedWatchServer
	etcd etcdKV

	behind, ahead int64
	mu            sync.Mutex
	linearizable  int
}

type etcdKV struct {
	etcdserverpb.UnimplementedKVServer
	m *laggingMember
}

// read is the member's answer to a read: its own state when
// serializable, the cluster's otherwise.
func (m *laggingMember) read(serializable bool) (string, int64) {
	if serializable {
		return "old", m.behind
	}
	m.mu.Lock()
	m.linearizable++
	m.mu.Unlock()
	return "new", m.ahead
}

func (m *laggingMember) reasked() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.linearizable
}

func (m *laggingMember) Range(_ context.Context, req *dkvpb.RangeRequest) (*dkvpb.RangeResponse, error) {
	v, rev := m.read(req.Serializable)
	return &dkvpb.RangeResponse{Header: &dkvpb.ResponseHeader{Revision: rev},
		Kvs: []*dkvpb.KeyValue{{Key: req.Key, Value: []byte(v)}}, Count: 1}, nil
}

func (m *laggingMember) Put(context.Context, *dkvpb.PutRequest) (*dkvpb.PutResponse, error) {
	return &dkvpb.PutResponse{Header: &dkvpb.ResponseHeader{Revision: m.ahead}}, nil
}

func (e etcdKV) Range(_ context.Context, req *etcdserverpb.RangeRequest) (*etcdserverpb.RangeResponse, error) {
	v, rev := e.m.read(req.Serializable)
	return &etcdserverpb.RangeResponse{Header: &etcdserverpb.ResponseHeader{Revision: rev},
		Kvs: []*mvccpb.KeyValue{{Key: req.Key, Value: []byte(v)}}, Count: 1}, nil
}

func (e etcdKV) Put(context.Context, *etcdserverpb.PutRequest) (*etcdserverpb.PutResponse, error) {
	return &etcdserverpb.PutResponse{Header: &etcdserverpb.ResponseHeader{Revision: e.m.ahead}}, nil
}

// Watch is the cache's keyspace watch on this member: created at the
// member's revision, then silent (no event reaches the lagging member),
// progress requests unanswered.
func (m *laggingMember) Watch(st dkvpb.Watch_WatchServer) error {
	if _, err := st.Recv(); err != nil {
		return err
	}
	if err := st.Send(&dkvpb.WatchResponse{Header: &dkvpb.ResponseHeader{Revision: m.behind}, WatchId: 1, Created: true}); err != nil {
		return err
	}
	for {
		if _, err := st.Recv(); err != nil {
			return err
		}
	}
}

// TestCacheReasksLinearizably: a client that wrote through the proxy at
// revision R never reads back, serializably, an answer older than R,
// even when the member the proxy asks has not applied R yet: the proxy
// asks again linearizably. Both DKV's and etcd's Range.
func TestCacheReasksLinearizably(t *testing.T) {
	for _, api := range []string{"dkv", "etcd"} {
		t.Run(api, func(t *testing.T) {
			m := &laggingMember{behind: 5, ahead: 10}
			m.etcd.m = m
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := grpc.NewServer()
			dkvpb.RegisterKVServer(srv, m)
			dkvpb.RegisterWatchServer(srv, m)
			etcdserverpb.RegisterKVServer(srv, m.etcd)
			go srv.Serve(lis)
			defer srv.Stop()
			p, err := proxy.Start(proxy.Config{Endpoints: []string{lis.Addr().String()}, ListenAddr: "127.0.0.1:0", Logger: testutil.Quiet})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			conn, err := grpc.NewClient("passthrough:///"+p.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), waitLong)
			defer cancel()

			// A serializable read and a write, each answered at the
			// revision the member gives.
			get := func() (string, int64) {
				t.Helper()
				if api == "dkv" {
					r, err := dkvpb.NewKVClient(conn).Range(ctx, &dkvpb.RangeRequest{Key: []byte("k"), Serializable: true})
					if err != nil {
						t.Fatal(err)
					}
					return string(r.Kvs[0].Value), r.Header.Revision
				}
				r, err := etcdserverpb.NewKVClient(conn).Range(ctx, &etcdserverpb.RangeRequest{Key: []byte("k"), Serializable: true})
				if err != nil {
					t.Fatal(err)
				}
				return string(r.Kvs[0].Value), r.Header.Revision
			}
			put := func() int64 {
				t.Helper()
				if api == "dkv" {
					r, err := dkvpb.NewKVClient(conn).Put(ctx, &dkvpb.PutRequest{Key: []byte("k"), Value: []byte("new")})
					if err != nil {
						t.Fatal(err)
					}
					return r.Header.Revision
				}
				r, err := etcdserverpb.NewKVClient(conn).Put(ctx, &etcdserverpb.PutRequest{Key: []byte("k"), Value: []byte("new")})
				if err != nil {
					t.Fatal(err)
				}
				return r.Header.Revision
			}

			if v, rev := get(); v != "old" || rev != m.behind {
				t.Fatalf("first serializable read: %q at %d, want the member's %q at %d", v, rev, "old", m.behind)
			}
			if m.reasked() != 0 {
				t.Fatalf("a first read, with no revision seen before, was asked again linearizably")
			}
			seen := put()
			for i := range 5 {
				v, rev := get()
				if rev < seen || v != "new" {
					t.Fatalf("serializable read %d after a write at revision %d: %q at revision %d; the client went back in time", i, seen, v, rev)
				}
			}
			if m.reasked() == 0 {
				t.Error("no linearizable read reached the member, yet the client read its write")
			}
		})
	}
}
