package etcdapi_test

import (
	"context"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/server"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	_ "go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	_ "go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// pollT polls a condition until it holds or a deadline passes.
type pollT struct{ t *testing.T }

func (p *pollT) until(cond func() bool, what string) {
	p.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			p.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startNodeWith is startNode with the config changed by edit.
func startNodeWith(t *testing.T, edit func(*server.Config)) *node {
	t.Helper()
	cfg := server.Config{DataDir: t.TempDir(), ClientAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", TickInterval: 10 * time.Millisecond, NoSync: true}
	edit(&cfg)
	s, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Ready():
	case <-ctx.Done():
		t.Fatal("server not ready")
	}
	conn, err := s.DialInProcess(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); s.Stop() })
	return &node{s: s, conn: conn,
		kv: etcdserverpb.NewKVClient(conn), w: etcdserverpb.NewWatchClient(conn), l: etcdserverpb.NewLeaseClient(conn),
		dkv: dkvpb.NewKVClient(conn)}
}

// TestLockElectionRegistration: etcd's v3lock and v3election generated
// files register beside DKV's own lock service and etcd's etcdserverpb
// (no file or name conflict at init); the other tests call them.
func TestLockElectionRegistration(t *testing.T) {
	for _, name := range []protoreflect.FullName{"v3lockpb.Lock", "v3electionpb.Election", "dkv.v1.Lock", "etcdserverpb.Maintenance", "etcdserverpb.Cluster", "etcdserverpb.Auth"} {
		if _, err := protoregistry.GlobalFiles.FindDescriptorByName(name); err != nil {
			t.Errorf("%s not registered: %v", name, err)
		}
	}
}
