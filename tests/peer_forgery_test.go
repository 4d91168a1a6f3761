package tests

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/mvcc"
	"github.com/dkv-io/dkv/internal/storage"
	"github.com/dkv-io/dkv/internal/transport/transportpb"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// memberView is what a forged message could change on a member.
type memberView struct {
	term, commit, applied uint64
	rev                   int64
	hash                  uint64
}

func viewOf(t *testing.T, c *servertest.Cluster, nd *servertest.Node) memberView {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := nd.Cluster.Status(ctx, &dkvpb.StatusRequest{})
	if err != nil {
		t.Fatalf("status of %s: %v", nd.Name, err)
	}
	h := c.Hash(nd, 0)
	return memberView{term: st.GetRaftTerm(), commit: st.GetRaftIndex(), applied: st.GetRaftAppliedIndex(), rev: st.GetRevision(), hash: h.GetHash()}
}

// peerProof is the handshake proof a member opening a stream computes:
// HMAC-SHA256(secret, "dkvpeer1" | cluster | from | to).
func peerProof(secret []byte, cluster, from, to uint64) string {
	mac := hmac.New(sha256.New, secret)
	b := []byte("dkvpeer1")
	b = binary.BigEndian.AppendUint64(b, cluster)
	b = binary.BigEndian.AppendUint64(b, from)
	b = binary.BigEndian.AppendUint64(b, to)
	mac.Write(b)
	return hex.EncodeToString(mac.Sum(nil))
}

// forger speaks the peer protocol to one member the way an attacker
// would: it knows the public ids and, for some cases, a member's secret.
type forger struct {
	t       *testing.T
	cluster uint64
	// creds are the forger's transport credentials (nil: plaintext).
	creds credentials.TransportCredentials
}

func (f *forger) conn(addr string) *grpc.ClientConn {
	creds := f.creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { conn.Close() })
	return conn
}

// messages sends one frame on a fresh Messages stream with handshake md.
func (f *forger) messages(addr string, md metadata.MD, frameFrom, to uint64, ms ...*raftpb.Message) error {
	ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), md), 5*time.Second)
	defer cancel()
	st, err := transportpb.NewPeerClient(f.conn(addr)).Messages(ctx)
	if err != nil {
		return err
	}
	b := &transportpb.MessageBatch{ClusterId: f.cluster, From: frameFrom, To: to}
	for _, m := range ms {
		data, err := proto.Marshal(m)
		if err != nil {
			f.t.Fatal(err)
		}
		b.Messages = append(b.Messages, data)
	}
	if err := st.Send(b); err != nil {
		_, err = st.CloseAndRecv()
		return err
	}
	_, err = st.CloseAndRecv()
	return err
}

// snapshot sends a forged snapshot on the Snapshot stream.
func (f *forger) snapshot(addr string, md metadata.MD, chunkFrom, to uint64, m *raftpb.Message) error {
	ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), md), 5*time.Second)
	defer cancel()
	st, err := transportpb.NewPeerClient(f.conn(addr)).Snapshot(ctx)
	if err != nil {
		return err
	}
	data, err := proto.Marshal(m)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := st.Send(&transportpb.SnapshotChunk{ClusterId: f.cluster, From: chunkFrom, To: to, Message: data}); err != nil {
		_, err = st.CloseAndRecv()
		return err
	}
	_, err = st.CloseAndRecv()
	return err
}

func handshake(from uint64, proof string) metadata.MD {
	return metadata.Pairs("dkv-peer-from", strconv.FormatUint(from, 16), "dkv-peer-proof", proof)
}

// TestForgedPeerMessagesChangeNothing sends forged MsgApp, MsgHeartbeat
// and MsgSnap frames to every member: from a non-member without a
// handshake, with a wrong one, with a right one (it knows the secret but
// is no member), and in a member's name over another member's stream.
// Every member's state, term and log must stay as they were, and the
// forged key must not exist anywhere.
func TestForgedPeerMessagesChangeNothing(t *testing.T) {
	c := servertest.NewCluster(t, 3, server.Config{})
	for _, nd := range c.Nodes {
		select {
		case <-nd.Srv.Ready():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s not ready", nd.Name)
		}
	}
	c.WaitConverged()
	ctx := context.Background()
	if _, err := c.WaitLeader().KV.Put(ctx, &dkvpb.PutRequest{Key: []byte("real"), Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	c.WaitConverged()
	before := idleViews(t, c)

	st, err := c.Nodes[0].Cluster.Status(ctx, &dkvpb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	f := &forger{t: t, cluster: st.GetHeader().GetClusterId()}
	secret := func(nd *servertest.Node) []byte { return peerSecretOf(t, nd) }

	const stranger = 999
	forgeries := func(from uint64, to *servertest.Node) []*raftpb.Message {
		return forgedMessages(before[to.Name], from, to)
	}
	send := func(what string, md metadata.MD, streamFrom, msgFrom uint64) {
		for _, to := range c.Nodes {
			ms := forgeries(msgFrom, to)
			for _, m := range ms {
				err := f.messages(to.PeerAddr, md, streamFrom, to.ID(), m)
				t.Logf("%s: %v to %s: %v", what, m.GetType(), to.Name, err)
			}
			err := f.snapshot(to.PeerAddr, md, streamFrom, to.ID(), ms[2])
			t.Logf("%s: snapshot stream to %s: %v", what, to.Name, err)
		}
	}
	n1, n2 := c.Nodes[0], c.Nodes[1]

	send("no handshake", metadata.MD{}, stranger, stranger)
	send("no handshake, a member's id", metadata.MD{}, n1.ID(), n1.ID())
	// A message "from" its receiver made raft panic.
	for _, to := range c.Nodes {
		sec := secret(to)
		md := handshake(to.ID(), peerProof(sec, f.cluster, to.ID(), to.ID()))
		for _, m := range forgeries(to.ID(), to) {
			err := f.messages(to.PeerAddr, md, to.ID(), to.ID(), m)
			t.Logf("secret, receiver's own id: %v to %s: %v", m.GetType(), to.Name, err)
		}
	}
	send("wrong proof", handshake(stranger, peerProof([]byte("guess"), f.cluster, stranger, n1.ID())), stranger, stranger)
	for _, to := range c.Nodes {
		// The right secret, but no member: a removed member, say.
		sec := secret(to)
		md := handshake(stranger, peerProof(sec, f.cluster, stranger, to.ID()))
		for _, m := range forgeries(stranger, to) {
			err := f.messages(to.PeerAddr, md, stranger, to.ID(), m)
			t.Logf("secret, non-member: %v to %s: %v", m.GetType(), to.Name, err)
		}
		// A stream bound to member a (whose secret the sender holds),
		// carrying frames or messages in the name of b or a stranger.
		a := n1
		if to == n1 {
			a = n2
		}
		mdA := handshake(a.ID(), peerProof(sec, f.cluster, a.ID(), to.ID()))
		var b *servertest.Node
		for _, o := range c.Nodes {
			if o != a && o != to {
				b = o
			}
		}
		for _, claim := range []uint64{b.ID(), stranger} {
			for _, m := range forgeries(claim, to) {
				err := f.messages(to.PeerAddr, mdA, claim, to.ID(), m) // frame claims another sender
				t.Logf("stream of %s, frame from %x: %v to %s: %v", a.Name, claim, m.GetType(), to.Name, err)
				err = f.messages(to.PeerAddr, mdA, a.ID(), to.ID(), m) // frame right, message claims another
				t.Logf("stream of %s, message from %x: %v to %s: %v", a.Name, claim, m.GetType(), to.Name, err)
			}
			ms := forgeries(claim, to)
			err := f.snapshot(to.PeerAddr, mdA, claim, to.ID(), ms[2])
			t.Logf("snapshot stream of %s, chunk from %x to %s: %v", a.Name, claim, to.Name, err)
			err = f.snapshot(to.PeerAddr, mdA, a.ID(), to.ID(), ms[2])
			t.Logf("snapshot stream of %s, message from %x to %s: %v", a.Name, claim, to.Name, err)
		}
	}

	onlyOneWriteSince(t, c, before)
}

// peerSecretOf is the peer secret in nd's data dir.
func peerSecretOf(t *testing.T, nd *servertest.Node) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(nd.Dir, "peer-secret"))
	if err != nil {
		t.Errorf("peer secret of %s: %v", nd.Name, err)
		return nil
	}
	sec, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return sec
}

// forgedMessages are a MsgApp that matches member to's log exactly (so
// it would be accepted and committed if it were believed), writing key
// "evil", a heartbeat and a MsgSnap, all with terms far above v's.
func forgedMessages(v memberView, from uint64, to *servertest.Node) []*raftpb.Message {
	evil, _ := proto.Marshal(&dkvpb.InternalRequest{Id: 4242, Request: &dkvpb.InternalRequest_Put{Put: &dkvpb.PutRequest{Key: []byte("evil"), Value: []byte("forged")}}})
	hi := v.term + 1_000_000
	return []*raftpb.Message{
		{Type: raftpb.MsgApp.Enum(), From: new(from), To: new(to.ID()), Term: new(hi),
			Index: new(v.commit), LogTerm: new(v.term),
			Entries: []*raftpb.Entry{{Term: new(hi), Index: new(v.commit + 1), Data: evil}},
			Commit:  new(v.commit + 1)},
		{Type: raftpb.MsgHeartbeat.Enum(), From: new(from), To: new(to.ID()), Term: new(hi + 1), Commit: new(v.commit)},
		{Type: raftpb.MsgSnap.Enum(), From: new(from), To: new(to.ID()), Term: new(hi + 2),
			Snapshot: &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: new(v.commit + 100), Term: new(hi + 2),
				ConfState: &raftpb.ConfState{Voters: []uint64{from}}}}},
	}
}

// idleViews waits for every member's log to stop moving (each has
// published its client URL) and returns what each member looks like, so
// what follows is compared to a still cluster.
func idleViews(t *testing.T, c *servertest.Cluster) map[string]memberView {
	t.Helper()
	// A member publishes its client URL, through raft, once it is
	// ready: wait until every member's is applied everywhere.
	c.Eventually(10*time.Second, "every client URL published", func() bool {
		for _, nd := range c.Nodes {
			ml, err := nd.Cluster.MemberList(context.Background(), &dkvpb.MemberListRequest{})
			if err != nil || len(ml.GetMembers()) != len(c.Nodes) {
				return false
			}
			for _, m := range ml.GetMembers() {
				if m.GetClientUrl() == "" {
					return false
				}
			}
		}
		return true
	})
	// Once every member has published its version, the leader moves the
	// keyspace to storage layout 3: one entry of its own, which must come
	// before the baseline.
	c.Eventually(10*time.Second, "every member in storage layout 3", func() bool {
		for _, nd := range c.Nodes {
			if nd.Srv.StorageLayout() != mvcc.LayoutValueOnce {
				return false
			}
		}
		return true
	})
	var before map[string]memberView
	c.Eventually(10*time.Second, "an idle cluster", func() bool {
		cur := map[string]memberView{}
		for _, nd := range c.Nodes {
			cur[nd.Name] = viewOf(t, c, nd)
		}
		same := before != nil
		for k, v := range cur {
			same = same && before[k] == v && v.applied == v.commit
		}
		before = cur
		return same
	})
	return before
}

// onlyOneWriteSince makes one real write and checks that it is all that
// changed on every member since before: term, commit index, the state at
// the old revision, no forged key "evil", and (after stopping the
// cluster) the log itself.
func onlyOneWriteSince(t *testing.T, c *servertest.Cluster, before map[string]memberView) {
	t.Helper()
	ctx := context.Background()
	// Every forged frame above was answered, so each member has taken it
	// in; a write that every member applies afterwards is ordered after
	// it in each raft loop. Then nothing but that write may have changed.
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for {
		l := c.WaitLeader()
		_, err := l.KV.Put(wctx, &dkvpb.PutRequest{Key: []byte("after"), Value: []byte("1")})
		if err == nil {
			break
		}
		if wctx.Err() != nil {
			t.Fatalf("put after the forgeries: %v", err)
		}
	}
	c.WaitConverged()
	for _, nd := range c.Nodes {
		was := before[nd.Name]
		got := viewOf(t, c, nd)
		if got.term != was.term {
			t.Errorf("%s: term %d after forged peer messages, was %d", nd.Name, got.term, was.term)
		}
		if got.commit != was.commit+1 {
			t.Errorf("%s: commit index %d after forged messages and one write, was %d", nd.Name, got.commit, was.commit)
		}
		if h := c.Hash(nd, was.rev); h.GetHash() != was.hash {
			t.Errorf("%s: state at revision %d changed (hash %x, was %x)", nd.Name, was.rev, h.GetHash(), was.hash)
		}
		r, err := nd.KV.Range(ctx, &dkvpb.RangeRequest{Key: []byte("evil"), Serializable: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.GetKvs()) != 0 {
			t.Errorf("forged key committed on %s", nd.Name)
		}
	}
	// The log itself: nothing was appended but the one write. The
	// leader stops last: a leader stopped while its followers run hands
	// its leadership over (server.Stop), and the new leader's term starts
	// with an entry of its own.
	leader := c.WaitLeader()
	for _, nd := range c.Nodes {
		if nd != leader {
			c.Stop(nd)
		}
	}
	c.Stop(leader)
	for _, nd := range c.Nodes {
		st, err := storage.Open(nd.Dir, storage.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		last, _ := st.LastIndex()
		hs, _, _ := st.InitialState()
		st.Close()
		if w := before[nd.Name]; last != w.commit+1 || hs.GetTerm() != w.term {
			t.Errorf("%s: log ends at %d (term %d), want %d (term %d)", nd.Name, last, hs.GetTerm(), w.commit+1, w.term)
		}
	}
}
