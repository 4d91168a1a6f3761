package transport

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/dkv-io/dkv/internal/testutil"
	"github.com/dkv-io/dkv/internal/transport/transportpb"
	dto "github.com/prometheus/client_model/go"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// members is a recorder that knows who belongs.
type members struct {
	recorder
	ids map[uint64]bool
}

func (m *members) IsMember(id uint64) bool { return m.ids[id] }

func serveCfg(t *testing.T, cfg Config) (*GRPC, string) {
	t.Helper()
	tr := New(cfg)
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

// rawSend opens a Messages stream with handshake md and sends one frame.
func rawSend(t *testing.T, addr string, md metadata.MD, b *transportpb.MessageBatch) error {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), md), 5*time.Second)
	defer cancel()
	st, err := transportpb.NewPeerClient(conn).Messages(ctx)
	if err != nil {
		return err
	}
	if err := st.Send(b); err != nil {
		_, err = st.CloseAndRecv()
		return err
	}
	_, err = st.CloseAndRecv()
	return err
}

func frame(cluster, from, to uint64, ms ...*raftpb.Message) *transportpb.MessageBatch {
	b := &transportpb.MessageBatch{ClusterId: cluster, From: from, To: to}
	for _, m := range ms {
		data, _ := proto.Marshal(m)
		b.Messages = append(b.Messages, data)
	}
	return b
}

func hs(secret []byte, cluster, from, to uint64) metadata.MD {
	return metadata.Pairs(mdFrom, strconv.FormatUint(from, 16), mdProof, hexProof(secret, cluster, from, to))
}

func TestStreamsWithoutAValidHandshakeAreRefused(t *testing.T) {
	secret := []byte("s3cret")
	rb := &members{ids: map[uint64]bool{1: true, 2: true, 3: true}}
	b, addr := serveCfg(t, Config{ID: 2, ClusterID: 7, Raft: rb, Secret: secret})
	cases := []struct {
		name string
		md   metadata.MD
	}{
		{"none", metadata.MD{}},
		{"wrong secret", hs([]byte("guess"), 7, 1, 2)},
		{"proof for another receiver", hs(secret, 7, 1, 3)},
		{"proof for another sender", metadata.Pairs(mdFrom, "1", mdProof, hexProof(secret, 7, 3, 2))},
		{"right secret, not a member", hs(secret, 7, 99, 2)},
		{"right secret, the receiver's own id", hs(secret, 7, 2, 2)},
	}
	for _, c := range cases {
		err := rawSend(t, addr, c.md, frame(7, 1, 2, heartbeat(1, 2)))
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: got %v, want Unauthenticated", c.name, err)
		}
	}
	if rb.count() != 0 {
		t.Fatalf("raft was given %d messages from unauthenticated streams", rb.count())
	}
	refused := dropCount(b, DropHandshake) + dropCount(b, DropNotMember) + dropCount(b, DropFromMismatch)
	if refused != float64(len(cases)) {
		t.Fatalf("dropped counters sum to %v, want %d", refused, len(cases))
	}
}

func TestFramesNotFromTheStreamsMemberAreDropped(t *testing.T) {
	secret := []byte("s3cret")
	rb := &members{ids: map[uint64]bool{1: true, 2: true, 3: true}}
	b, addr := serveCfg(t, Config{ID: 2, ClusterID: 7, Raft: rb, Secret: secret})
	md := hs(secret, 7, 1, 2) // a stream that member 1 opened
	snap := &raftpb.Message{Type: raftpb.MsgSnap.Enum(), From: new(uint64(1)), To: new(uint64(2)), Snapshot: &raftpb.Snapshot{}}
	for _, f := range []*transportpb.MessageBatch{
		frame(7, 3, 2, heartbeat(3, 2)),  // the frame claims member 3
		frame(7, 1, 2, heartbeat(3, 2)),  // the message claims member 3
		frame(7, 1, 2, heartbeat(99, 2)), // the message claims a stranger
		frame(7, 1, 2, snap),             // MsgSnap belongs on the snapshot stream
		frame(7, 1, 2, heartbeat(1, 2)),  // the one good message
	} {
		if err := rawSend(t, addr, md, f); err != nil {
			t.Fatal(err)
		}
	}
	rb.mu.Lock()
	got := append([]*raftpb.Message(nil), rb.got...)
	rb.mu.Unlock()
	if len(got) != 1 || got[0].GetFrom() != 1 || got[0].GetType() != raftpb.MsgHeartbeat {
		t.Fatalf("raft was given %v, want only the heartbeat from member 1", got)
	}
	if n := dropCount(b, DropFromMismatch); n != 3 {
		t.Errorf("from_mismatch = %v, want 3", n)
	}
	if n := dropCount(b, DropSnapOnStream); n != 1 {
		t.Errorf("snap_on_messages_stream = %v, want 1", n)
	}
	// A member removed while its stream is open: its messages stop.
	rb.mu.Lock()
	delete(rb.ids, 1)
	rb.mu.Unlock()
	if err := rawSend(t, addr, md, frame(7, 1, 2, heartbeat(1, 2))); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("stream from a removed member: %v, want Unauthenticated", err)
	}
}

func TestMembersWithTheSameSecretTalk(t *testing.T) {
	secret := []byte("shared")
	rb := &members{ids: map[uint64]bool{1: true, 2: true}}
	_, addrB := serveCfg(t, Config{ID: 2, ClusterID: 7, Raft: rb, Secret: secret})
	a, _ := serveCfg(t, Config{ID: 1, ClusterID: 7, Raft: &recorder{}, Secret: secret})
	a.AddPeer(2, addrB)
	testutil.Eventually(t, 10*time.Second, "a heartbeat over an authenticated stream", func() bool {
		a.Send([]*raftpb.Message{heartbeat(1, 2)})
		return rb.count() > 0
	})

	rc := &members{ids: map[uint64]bool{1: true, 3: true}}
	_, addrC := serveCfg(t, Config{ID: 3, ClusterID: 7, Raft: rc, Secret: []byte("other")})
	ra := &recorder{}
	a2, _ := serveCfg(t, Config{ID: 1, ClusterID: 7, Raft: ra, Secret: secret})
	a2.AddPeer(3, addrC)
	testutil.Eventually(t, 10*time.Second, "the sender to see its stream refused", func() bool {
		a2.Send([]*raftpb.Message{heartbeat(1, 3)})
		return ra.unreachableCount(3) > 0
	})
	if rc.count() != 0 {
		t.Fatal("a member with another secret was heard")
	}
}

// TestReconnectBackoffIsCapped checks the connection backoff schedule: a
// peer that was down for any length of time is dialled again within a
// second of coming back. gRPC's default schedule (backoff.DefaultConfig,
// what the transport used before) reaches 120 s.
func TestReconnectBackoffIsCapped(t *testing.T) {
	worst := func(c backoff.Config, retries int) time.Duration {
		d := float64(c.BaseDelay)
		for range retries {
			d = min(d*c.Multiplier, float64(c.MaxDelay))
		}
		return time.Duration(d * (1 + c.Jitter))
	}
	for r := 0; r <= 100; r++ {
		if d := worst(reconnectBackoff, r); d > time.Second {
			t.Fatalf("after %d failed dials the next waits up to %v, want at most 1s", r, d)
		}
	}
	if maxStreamBackoff > time.Second {
		t.Fatalf("stream retry backoff %v, want at most 1s", maxStreamBackoff)
	}
}

// TestPeerThatReappearsIsRedialledAtOnce: with a backoff far longer than
// the test, the sender reconnects to a restarted peer only because the
// peer reached out to it first.
func TestPeerThatReappearsIsRedialledAtOnce(t *testing.T) {
	secret := []byte("shared")
	hour := backoff.Config{BaseDelay: time.Hour, Multiplier: 1, MaxDelay: time.Hour}
	ra := &members{ids: map[uint64]bool{1: true, 2: true}}
	a, addrA := serveCfg(t, Config{ID: 1, ClusterID: 7, Raft: ra, Secret: secret, reconnect: &hour})

	// Member 2's address, with nothing listening yet.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addrB := lis.Addr().String()
	lis.Close()
	a.AddPeer(2, addrB)
	testutil.Eventually(t, 10*time.Second, "the dial to the absent peer to fail", func() bool {
		a.Send([]*raftpb.Message{heartbeat(1, 2)})
		return ra.unreachableCount(2) > 0
	})

	// Member 2 comes up on that address and sends to member 1.
	rb := &members{ids: map[uint64]bool{1: true, 2: true}}
	b, addrB2 := serveAt(t, addrB, Config{ID: 2, ClusterID: 7, Raft: rb, Secret: secret})
	if addrB2 != addrB {
		t.Fatal("address moved")
	}
	b.AddPeer(1, addrA)
	testutil.Eventually(t, 10*time.Second, "member 1 to hear member 2", func() bool {
		b.Send([]*raftpb.Message{heartbeat(2, 1)})
		return ra.count() > 0
	})
	testutil.Eventually(t, 10*time.Second, "member 2 to hear member 1 again, before the hour-long backoff ends", func() bool {
		a.Send([]*raftpb.Message{heartbeat(1, 2)})
		return rb.count() > 0
	})
}

func serveAt(t *testing.T, addr string, cfg Config) (*GRPC, string) {
	t.Helper()
	tr := New(cfg)
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	tr.Register(srv)
	go srv.Serve(lis)
	t.Cleanup(func() { tr.Close(); srv.Stop() })
	return tr, lis.Addr().String()
}

func dropCount(tr *GRPC, reason string) float64 {
	var m dto.Metric
	if err := tr.drops.WithLabelValues(reason).Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}
