package etcdapi_test

import (
	"testing"
	"time"

	_ "go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	_ "go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// pollT polls a condition until it holds or a deadline passes.
type pollT struct{ t *testing.T }

func (p *pollT) until(cond func() bool, what string) {
	p.t.Helper()
	deadline := time.Now().Add(30 * time.Second) // a bound for a loaded machine, not a timing claim
	for !cond() {
		if time.Now().After(deadline) {
			p.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
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
