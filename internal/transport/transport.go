package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/dkv-io/dkv/internal/lograte"

	"github.com/dkv-io/dkv/internal/storage"
	"github.com/dkv-io/dkv/internal/transport/transportpb"
	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Raft is the local member the transport delivers to and reports to.
type Raft interface {
	Step(ctx context.Context, m *raftpb.Message) error
	// IsMember reports whether id may send to this member: a voter or
	// learner of the applied configuration or of a pending one. It is
	// part of this interface, not an optional extra, so that a wrapper
	// (server's contactRecorder) cannot silently turn the check off.
	IsMember(id uint64) bool
	ReportUnreachable(id uint64)
	ReportSnapshot(id uint64, st raft.SnapshotStatus)
}

// Config configures a GRPC transport.
type Config struct {
	ID        uint64
	ClusterID uint64
	Raft      Raft
	Storage   *storage.Storage
	Logger    *slog.Logger
	// QueueSize bounds each peer's outgoing queue (default 4096).
	QueueSize int
	Faults    *Faults
	// Secret is the cluster's peer secret: every stream proves it in its
	// handshake (see Proof), and streams that do not are refused.
	Secret []byte
	// TLS, when set, is what other members' peer ports are dialled with
	// (mutual TLS: it carries this member's certificate); nil dials in
	// plaintext. The handshake above is sent either way.
	TLS *tls.Config

	// reconnect overrides the connection backoff (tests).
	reconnect *backoff.Config
}

// reconnectBackoff is how a peer connection is re-dialled after it
// failed. gRPC's default grows to two minutes, so a member that was down
// for a while waited that long to be dialled again after it came back;
// capped, a restarted member is dialled again within a second (and at
// once when it reaches out first, see peerSeen). The worst case is
// MaxDelay*(1+Jitter) = 960ms.
var reconnectBackoff = backoff.Config{
	BaseDelay:  50 * time.Millisecond,
	Multiplier: 1.6,
	Jitter:     0.2,
	MaxDelay:   800 * time.Millisecond,
}

// maxStreamBackoff caps the wait between attempts to open a stream.
const maxStreamBackoff = 800 * time.Millisecond

// GRPC is the gRPC peer transport.
type GRPC struct {
	transportpb.UnimplementedPeerServer
	cfg Config
	log *slog.Logger

	mu    sync.RWMutex
	peers map[uint64]*peer
	stopc chan struct{}
	wg    sync.WaitGroup

	drops   *prometheus.CounterVec
	limiter *lograte.Limiter
}

// New returns a transport with no peers; AddPeer adds them.
func New(cfg Config) *GRPC {
	if cfg.QueueSize == 0 {
		cfg.QueueSize = 4096
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Faults == nil {
		cfg.Faults = &Faults{}
	}
	return &GRPC{cfg: cfg, log: cfg.Logger, peers: map[uint64]*peer{}, stopc: make(chan struct{}), drops: newDropCounter(), limiter: lograte.New(logEvery)}
}

// Register adds the Peer service to a gRPC server (the peer listener's).
func (t *GRPC) Register(s *grpc.Server) { transportpb.RegisterPeerServer(s, t) }

// SetRaft sets the local member after construction (the node and its
// transport refer to each other).
func (t *GRPC) SetRaft(r Raft) { t.cfg.Raft = r }

// AddPeer starts (or re-points) the sender to member id at addr.
func (t *GRPC) AddPeer(id uint64, addr string) {
	if id == t.cfg.ID || addr == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.peers[id]; ok {
		if p.addr == addr {
			return
		}
		p.stop()
	}
	p := &peer{t: t, id: id, addr: addr, q: make(chan *raftpb.Message, t.cfg.QueueSize), snapq: make(chan *raftpb.Message, 1), stopc: make(chan struct{}), kickc: make(chan struct{}, 1)}
	t.peers[id] = p
	t.wg.Add(2)
	go p.run()
	go p.runSnapshots()
}

// RemovePeer stops sending to member id.
func (t *GRPC) RemovePeer(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.peers[id]; ok {
		p.stop()
		delete(t.peers, id)
	}
}

// peerSeen is called when member id has opened an authenticated stream
// to us: it is up, so a connection to it that is waiting out a backoff is
// re-dialled now rather than when the backoff ends.
func (t *GRPC) peerSeen(id uint64) {
	t.mu.RLock()
	p := t.peers[id]
	t.mu.RUnlock()
	if p != nil {
		p.kick()
	}
}

// Peers returns the ids currently known.
func (t *GRPC) Peers() map[uint64]string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make(map[uint64]string, len(t.peers))
	for id, p := range t.peers {
		out[id] = p.addr
	}
	return out
}

// Close stops every sender.
func (t *GRPC) Close() {
	t.mu.Lock()
	select {
	case <-t.stopc:
	default:
		close(t.stopc)
	}
	for id, p := range t.peers {
		p.stop()
		delete(t.peers, id)
	}
	t.mu.Unlock()
	t.wg.Wait()
}

// Send queues msgs for their peers without blocking.
func (t *GRPC) Send(msgs []*raftpb.Message) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, m := range msgs {
		to := m.GetTo()
		p, ok := t.peers[to]
		if !ok {
			continue
		}
		// Faults apply when a message is sent (and again when its frame
		// leaves, for what was queued before a cut).
		if t.cfg.Faults.dropSend(t.cfg.ID, to, m.GetType()) {
			continue
		}
		if m.GetType() == raftpb.MsgSnap {
			select {
			case p.snapq <- m:
			default:
				// One snapshot at a time per peer; raft will ask again.
				go t.cfg.Raft.ReportSnapshot(to, raft.SnapshotFailure)
			}
			continue
		}
		select {
		case p.q <- m:
		default:
			go t.cfg.Raft.ReportUnreachable(to)
		}
	}
}

type peer struct {
	t        *GRPC
	id       uint64
	addr     string
	q        chan *raftpb.Message
	snapq    chan *raftpb.Message
	stopc    chan struct{}
	stopOnce sync.Once
	kickc    chan struct{} // wakes run from its backoff
	connMu   sync.Mutex
	conn     *grpc.ClientConn
}

func (p *peer) stop() { p.stopOnce.Do(func() { close(p.stopc) }) }

// kick re-dials a peer whose connection or stream is waiting out a
// backoff (it does nothing to a healthy connection).
func (p *peer) kick() {
	p.connMu.Lock()
	if p.conn != nil {
		p.conn.ResetConnectBackoff()
	}
	p.connMu.Unlock()
	select {
	case p.kickc <- struct{}{}:
	default:
	}
}

// StreamWindowBytes and ConnWindowBytes are the HTTP/2 flow-control
// windows of peer connections, on both ends (the peer server sets them
// too). Fixed windows turn off gRPC's bandwidth estimation, which sends a
// ping for about every message received while the link is quiet: on an
// idle cluster, heartbeats that cost two more writes and reads each. A
// raft message stream never has more in flight than the raft inflight
// limit, and snapshots are sent in chunks, so these bound nothing that
// the estimator would have grown past on a LAN.
const (
	StreamWindowBytes = 4 << 20
	ConnWindowBytes   = 8 << 20
)

func (p *peer) client() (transportpb.PeerClient, error) {
	p.connMu.Lock()
	defer p.connMu.Unlock()
	if p.conn == nil {
		bo := reconnectBackoff
		if p.t.cfg.reconnect != nil {
			bo = *p.t.cfg.reconnect
		}
		creds := insecure.NewCredentials()
		if p.t.cfg.TLS != nil {
			creds = credentials.NewTLS(p.t.cfg.TLS)
		}
		c, err := grpc.NewClient("passthrough:///"+p.addr,
			grpc.WithTransportCredentials(creds),
			grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(256<<20)),
			grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: 2 * time.Second}),
			grpc.WithInitialWindowSize(StreamWindowBytes),
			grpc.WithInitialConnWindowSize(ConnWindowBytes),
		)
		if err != nil {
			return nil, err
		}
		p.conn = c
	}
	return transportpb.NewPeerClient(p.conn), nil
}

func (p *peer) closeConn() {
	p.connMu.Lock()
	defer p.connMu.Unlock()
	if p.conn != nil {
		p.conn.Close()
		p.conn = nil
	}
}

// run keeps one Messages stream open and batches the queue into it.
func (p *peer) run() {
	defer p.t.wg.Done()
	defer p.closeConn()
	backoff := 50 * time.Millisecond
	for {
		select {
		case <-p.stopc:
			return
		default:
		}
		err := p.stream()
		if err == nil {
			return
		}
		p.t.cfg.Raft.ReportUnreachable(p.id)
		if c := status.Code(err); c == codes.Unauthenticated || c == codes.FailedPrecondition {
			// A misconfigured member (wrong secret, cluster or id) must
			// be visible to its operator.
			p.t.warnLimited("refused-by-peer", fmt.Sprintf("peer %x at %s refused our stream: %v", p.id, p.addr, err))
		} else {
			p.t.log.Debug("peer stream broke", "peer", fmt.Sprintf("%x", p.id), "err", err)
		}
		// Drop what is queued: raft resends after it learns the peer is
		// unreachable, and stale heartbeats only add load.
		p.drain()
		select {
		case <-p.stopc:
			return
		case <-p.kickc:
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, maxStreamBackoff)
	}
}

func (p *peer) drain() {
	for {
		select {
		case <-p.q:
		default:
			return
		}
	}
}

const maxBatchBytes = 4 << 20

// stream sends the queue on one Messages stream until it breaks.
func (p *peer) stream() error {
	c, err := p.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(p.t.outgoing(context.Background(), p.id))
	defer cancel()
	st, err := c.Messages(ctx)
	if err != nil {
		return err
	}
	faults := p.t.cfg.Faults
	for {
		var m *raftpb.Message
		select {
		case <-p.stopc:
			st.CloseAndRecv()
			return nil
		case m = <-p.q:
		}
		batch := &transportpb.MessageBatch{ClusterId: p.t.cfg.ClusterID, From: p.t.cfg.ID, To: p.id}
		size := 0
		for m != nil {
			if !faults.isCut(p.t.cfg.ID, p.id) {
				b, err := proto.Marshal(m)
				if err != nil {
					return err
				}
				batch.Messages = append(batch.Messages, b)
				size += len(b)
			}
			m = nil
			if size < maxBatchBytes {
				select {
				case m = <-p.q:
				default:
				}
			}
		}
		if len(batch.Messages) == 0 {
			continue
		}
		if d := faults.delay(p.t.cfg.ID, p.id); d > 0 {
			select {
			case <-time.After(d):
			case <-p.stopc:
				return nil
			}
		}
		if err := st.Send(batch); err != nil {
			if errors.Is(err, io.EOF) {
				_, err = st.CloseAndRecv()
			}
			return fmt.Errorf("send to %s: %w", p.addr, err)
		}
	}
}

// runSnapshots sends snapshots one at a time on their own stream.
func (p *peer) runSnapshots() {
	defer p.t.wg.Done()
	for {
		select {
		case <-p.stopc:
			return
		case m := <-p.snapq:
			err := p.sendSnapshot(m)
			st := raft.SnapshotFinish
			if err != nil {
				st = raft.SnapshotFailure
				p.t.log.Warn("snapshot send failed", "peer", fmt.Sprintf("%x", p.id), "err", err)
			} else {
				p.t.log.Info("snapshot sent", "peer", fmt.Sprintf("%x", p.id), "index", m.GetSnapshot().GetMetadata().GetIndex())
			}
			p.t.cfg.Raft.ReportSnapshot(p.id, st)
		}
	}
}

func (p *peer) sendSnapshot(m *raftpb.Message) error {
	if p.t.cfg.Faults.drop(p.t.cfg.ID, p.id) {
		return errors.New("dropped by fault injection")
	}
	c, err := p.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(p.t.outgoing(context.Background(), p.id))
	defer cancel()
	go func() {
		select {
		case <-p.stopc:
			cancel()
		case <-ctx.Done():
		}
	}()
	st, err := c.Snapshot(ctx)
	if err != nil {
		return err
	}
	hdr := func() *transportpb.SnapshotChunk {
		return &transportpb.SnapshotChunk{ClusterId: p.t.cfg.ClusterID, From: p.t.cfg.ID, To: p.id}
	}
	err = p.t.cfg.Storage.StreamState(1<<20, func(chunk []byte) error {
		ch := hdr()
		ch.Data = chunk
		return st.Send(ch)
	})
	if err != nil {
		return err
	}
	mb, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	last := hdr()
	last.Message = mb
	if err := st.Send(last); err != nil {
		return err
	}
	_, err = st.CloseAndRecv()
	return err
}

// Messages receives one sender's stream. The stream is bound to the member
// its handshake proves; nothing on it reaches raft unless it comes from
// that member, is addressed to this one, and the member still belongs to
// the cluster.
func (t *GRPC) Messages(st grpc.ClientStreamingServer[transportpb.MessageBatch, transportpb.Ack]) error {
	from, err := t.authenticate(st.Context())
	if err != nil {
		return err
	}
	t.peerSeen(from)
	for {
		b, err := st.Recv()
		if err == io.EOF {
			return st.SendAndClose(&transportpb.Ack{})
		}
		if err != nil {
			return err
		}
		if err := t.checkFrame(b.GetClusterId(), b.GetTo(), len(b.GetMessages())); err != nil {
			return err
		}
		if b.GetFrom() != from {
			t.dropped(DropFromMismatch, len(b.GetMessages()), fmt.Sprintf("frame claims sender %x on a stream bound to %x", b.GetFrom(), from))
			continue
		}
		if t.cfg.Faults.drop(b.GetFrom(), t.cfg.ID) {
			continue
		}
		if !t.isMember(from) {
			t.dropped(DropNotMember, len(b.GetMessages()), fmt.Sprintf("messages from %x, which is no longer a member", from))
			continue
		}
		for _, data := range b.GetMessages() {
			m := &raftpb.Message{}
			if err := proto.Unmarshal(data, m); err != nil {
				t.dropped(DropBadMessage, 1, fmt.Sprintf("undecodable raft message from %x: %v", from, err))
				return status.Errorf(codes.InvalidArgument, "bad raft message: %v", err)
			}
			if !t.admit(m, from) {
				continue
			}
			// A snapshot's state comes on the Snapshot stream, staged
			// before raft sees the MsgSnap; one here would make raft
			// install a snapshot whose state was never received.
			if m.GetType() == raftpb.MsgSnap {
				t.dropped(DropSnapOnStream, 1, fmt.Sprintf("MsgSnap from %x on the messages stream", from))
				continue
			}
			if err := t.cfg.Raft.Step(st.Context(), m); err != nil {
				return err
			}
		}
	}
}

// admit checks one decoded message against the stream's member.
func (t *GRPC) admit(m *raftpb.Message, from uint64) bool {
	if m.GetFrom() != from {
		t.dropped(DropFromMismatch, 1, fmt.Sprintf("%v claims sender %x on a stream bound to %x", m.GetType(), m.GetFrom(), from))
		return false
	}
	if m.GetTo() != t.cfg.ID {
		t.dropped(DropWrongTarget, 1, fmt.Sprintf("%v from %x is addressed to %x, this member is %x", m.GetType(), from, m.GetTo(), t.cfg.ID))
		return false
	}
	return true
}

// Snapshot receives a snapshot, stages it, then hands raft the MsgSnap.
// The handshake is checked before anything is staged.
func (t *GRPC) Snapshot(st grpc.ClientStreamingServer[transportpb.SnapshotChunk, transportpb.Ack]) error {
	from, err := t.authenticate(st.Context())
	if err != nil {
		return err
	}
	t.peerSeen(from)
	stager, err := t.cfg.Storage.StageSnapshot()
	if err != nil {
		return status.Errorf(codes.Internal, "stage snapshot: %v", err)
	}
	committed := false
	defer func() {
		if !committed {
			stager.Abort()
		}
	}()
	for {
		ch, err := st.Recv()
		if err != nil {
			return err
		}
		if err := t.checkFrame(ch.GetClusterId(), ch.GetTo(), 1); err != nil {
			return err
		}
		if ch.GetFrom() != from {
			t.dropped(DropFromMismatch, 1, fmt.Sprintf("snapshot chunk claims sender %x on a stream bound to %x", ch.GetFrom(), from))
			return status.Errorf(codes.PermissionDenied, "snapshot chunk from %x on a stream bound to %x", ch.GetFrom(), from)
		}
		if !t.isMember(from) {
			t.dropped(DropNotMember, 1, fmt.Sprintf("snapshot from %x, which is no longer a member", from))
			return status.Errorf(codes.PermissionDenied, "%x is not a member", from)
		}
		if len(ch.GetData()) > 0 {
			if err := stager.Write(ch.GetData()); err != nil {
				return status.Errorf(codes.Internal, "stage snapshot: %v", err)
			}
		}
		if len(ch.GetMessage()) == 0 {
			continue
		}
		m := &raftpb.Message{}
		if err := proto.Unmarshal(ch.GetMessage(), m); err != nil {
			t.dropped(DropBadMessage, 1, fmt.Sprintf("undecodable snapshot message from %x: %v", from, err))
			return status.Errorf(codes.InvalidArgument, "bad snapshot message: %v", err)
		}
		if !t.admit(m, from) || m.GetType() != raftpb.MsgSnap {
			if m.GetType() != raftpb.MsgSnap {
				t.dropped(DropBadMessage, 1, fmt.Sprintf("snapshot stream from %x ends with %v, not MsgSnap", from, m.GetType()))
			}
			return status.Errorf(codes.PermissionDenied, "snapshot message refused")
		}
		if err := stager.Commit(m.GetSnapshot().GetMetadata().GetIndex()); err != nil {
			return status.Errorf(codes.Internal, "stage snapshot: %v", err)
		}
		committed = true
		if err := t.cfg.Raft.Step(st.Context(), m); err != nil {
			return err
		}
		return st.SendAndClose(&transportpb.Ack{})
	}
}

func (t *GRPC) checkFrame(clusterID, to uint64, n int) error {
	if clusterID != t.cfg.ClusterID {
		t.dropped(DropWrongTarget, n, fmt.Sprintf("frame for cluster %x, this member belongs to %x", clusterID, t.cfg.ClusterID))
		return status.Errorf(codes.FailedPrecondition, "cluster id mismatch: frame for cluster %x, this member belongs to %x", clusterID, t.cfg.ClusterID)
	}
	if to != t.cfg.ID {
		t.dropped(DropWrongTarget, n, fmt.Sprintf("frame for member %x, this member is %x", to, t.cfg.ID))
		return status.Errorf(codes.FailedPrecondition, "member id mismatch: frame for %x, this member is %x", to, t.cfg.ID)
	}
	return nil
}
