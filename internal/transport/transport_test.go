package transport

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/dkv-io/dkv/internal/testutil"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
)

// recorder is a Raft that records what it is given.
type recorder struct {
	mu          sync.Mutex
	got         []*raftpb.Message
	unreachable map[uint64]int
}

func (r *recorder) Step(_ context.Context, m *raftpb.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, m)
	return nil
}

func (r *recorder) ReportUnreachable(id uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unreachable == nil {
		r.unreachable = map[uint64]int{}
	}
	r.unreachable[id]++
}

func (r *recorder) ReportSnapshot(uint64, raft.SnapshotStatus) {}

// IsMember: a plain recorder takes every sender for a member (members, in
// auth_test.go, knows better).
func (r *recorder) IsMember(uint64) bool { return true }

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

func (r *recorder) unreachableCount(id uint64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.unreachable[id]
}

// serve starts a transport for member id of cluster on a loopback port.
func serve(t *testing.T, id, cluster uint64, r Raft, f *Faults) (*GRPC, string) {
	t.Helper()
	tr := New(Config{ID: id, ClusterID: cluster, Raft: r, Faults: f})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	tr.Register(srv)
	go srv.Serve(lis)
	t.Cleanup(func() { tr.Close(); srv.Stop() })
	return tr, lis.Addr().String()
}

func heartbeat(from, to uint64) *raftpb.Message {
	return &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: new(from), To: new(to)}
}

func TestMessagesArriveInOrderAcrossOneStream(t *testing.T) {
	rb := &recorder{}
	_, addrB := serve(t, 2, 7, rb, nil)
	a, _ := serve(t, 1, 7, &recorder{}, nil)
	a.AddPeer(2, addrB)
	const n = 500
	for i := 0; i < n; i++ {
		m := heartbeat(1, 2)
		m.Commit = new(uint64(i))
		a.Send([]*raftpb.Message{m})
	}
	testutil.Eventually(t, 10*time.Second, "all messages delivered", func() bool { return rb.count() == n })
	rb.mu.Lock()
	defer rb.mu.Unlock()
	for i, m := range rb.got {
		if m.GetCommit() != uint64(i) {
			t.Fatalf("message %d carries %d: reordered or lost", i, m.GetCommit())
		}
	}
}

func TestFramesFromAnotherClusterAreRefused(t *testing.T) {
	rb := &recorder{}
	_, addrB := serve(t, 2, 7, rb, nil)
	ra := &recorder{}
	a, _ := serve(t, 1, 8, ra, nil) // a different cluster id
	a.AddPeer(2, addrB)
	// Keep sending until the sender has seen its stream refused.
	testutil.Eventually(t, 10*time.Second, "sender to report the peer unreachable", func() bool {
		a.Send([]*raftpb.Message{heartbeat(1, 2)})
		return ra.unreachableCount(2) > 0
	})
	if rb.count() != 0 {
		t.Fatalf("receiver stepped %d messages from another cluster", rb.count())
	}
}

func TestCutDropsAndHealRestores(t *testing.T) {
	f := &Faults{}
	rb := &recorder{}
	_, addrB := serve(t, 2, 7, rb, f)
	a, _ := serve(t, 1, 7, &recorder{}, f)
	a.AddPeer(2, addrB)
	f.Cut(1, 2)
	for i := 0; i < 50; i++ {
		a.Send([]*raftpb.Message{heartbeat(1, 2)})
	}
	// Anything sent after Heal arrives; nothing sent while cut does.
	f.Heal()
	marker := heartbeat(1, 2)
	marker.Commit = new(uint64(99))
	testutil.Eventually(t, 10*time.Second, "the marker after heal", func() bool {
		a.Send([]*raftpb.Message{marker})
		rb.mu.Lock()
		defer rb.mu.Unlock()
		for _, m := range rb.got {
			if m.GetCommit() != 99 {
				t.Fatalf("a message sent while cut was delivered")
			}
		}
		return len(rb.got) > 0
	})
}
