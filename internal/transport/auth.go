package transport

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// The handshake is gRPC metadata on each peer stream: the sender's member
// id and a proof that it knows the cluster's peer secret. The proof binds
// the stream to (cluster, from, to), so a stream opened by one member
// cannot be used to speak for another. Without peer TLS the proof travels
// in the clear: it keeps out anyone who only knows the public ids, not an
// observer on the path (docs/cluster.md says so).
const (
	mdFrom  = "dkv-peer-from"
	mdProof = "dkv-peer-proof"
)

// Drop reasons, the values of the reason label of
// dkv_peer_messages_dropped_total.
const (
	DropHandshake    = "handshake"     // stream without a valid handshake
	DropNotMember    = "not_member"    // sender is not a voter or learner
	DropFromMismatch = "from_mismatch" // frame or message not from the stream's member
	DropWrongTarget  = "wrong_target"  // frame for another cluster or member
	DropSnapOnStream = "snap_on_messages_stream"
	DropBadMessage   = "bad_message"
)

var dropReasons = []string{DropHandshake, DropNotMember, DropFromMismatch, DropWrongTarget, DropSnapOnStream, DropBadMessage}

// Proof is the handshake's HMAC-SHA256 of (cluster, from, to) under secret.
func Proof(secret []byte, clusterID, from, to uint64) []byte {
	mac := hmac.New(sha256.New, secret)
	var b [8 + 24]byte
	copy(b[:8], "dkvpeer1")
	binary.BigEndian.PutUint64(b[8:], clusterID)
	binary.BigEndian.PutUint64(b[16:], from)
	binary.BigEndian.PutUint64(b[24:], to)
	mac.Write(b[:])
	return mac.Sum(nil)
}

// outgoing adds the handshake for a stream to member to.
func (t *GRPC) outgoing(ctx context.Context, to uint64) context.Context {
	return metadata.AppendToOutgoingContext(ctx,
		mdFrom, strconv.FormatUint(t.cfg.ID, 16),
		mdProof, hexProof(t.cfg.Secret, t.cfg.ClusterID, t.cfg.ID, to))
}

// authenticate checks an incoming stream's handshake and returns the
// member it is bound to.
func (t *GRPC) authenticate(ctx context.Context) (uint64, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	froms, proofs := md.Get(mdFrom), md.Get(mdProof)
	if len(froms) != 1 || len(proofs) != 1 {
		return 0, t.refuse(DropHandshake, "peer stream without a handshake (is the sender a DKV member of this version?)")
	}
	from, err := strconv.ParseUint(froms[0], 16, 64)
	if err != nil || from == 0 {
		return 0, t.refuse(DropHandshake, fmt.Sprintf("peer handshake names a bad member id %q", froms[0]))
	}
	proof, err := hex.DecodeString(proofs[0])
	if err != nil || !hmac.Equal(proof, Proof(t.cfg.Secret, t.cfg.ClusterID, from, t.cfg.ID)) {
		return 0, t.refuse(DropHandshake, fmt.Sprintf("peer handshake from %x does not prove the cluster's peer secret (a different --initial-cluster-token or peer-secret file?)", from))
	}
	if from == t.cfg.ID {
		// raft panics on a message from itself.
		return 0, t.refuse(DropFromMismatch, fmt.Sprintf("peer stream claims to come from this member (%x)", from))
	}
	if !t.isMember(from) {
		return 0, t.refuse(DropNotMember, fmt.Sprintf("peer stream from %x, which is not a member of this cluster", from))
	}
	return from, nil
}

func (t *GRPC) refuse(reason, msg string) error {
	t.dropped(reason, 1, msg)
	return status.Error(codes.Unauthenticated, msg)
}

// isMember fails closed: before the local member is set, nobody is one.
func (t *GRPC) isMember(id uint64) bool {
	r := t.cfg.Raft
	return r != nil && r.IsMember(id)
}

// dropped counts n messages dropped for reason and logs it, at most once
// per reason every logEvery.
func (t *GRPC) dropped(reason string, n int, msg string) {
	t.drops.WithLabelValues(reason).Add(float64(n))
	t.warnLimited(reason, msg)
}

// Metrics is the transport's collector (dkv_peer_messages_dropped_total),
// for the node's registry.
func (t *GRPC) Metrics() prometheus.Collector { return t.drops }

func newDropCounter() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "dkv", Name: "peer_messages_dropped_total",
		Help: "Peer traffic dropped before raft saw it, by reason (handshake: a stream refused for a missing or wrong peer secret; not_member: the sender is not a voter or learner; from_mismatch: a frame not from the stream's member).",
	}, []string{"reason"})
	for _, r := range dropReasons {
		c.WithLabelValues(r)
	}
	return c
}

// logEvery: refused traffic is logged once per reason per interval.
const logEvery = 10 * time.Second

// warnLimited logs a refusal, at most once per reason every logEvery,
// saying how many were not logged since.
func (t *GRPC) warnLimited(reason, msg string) {
	if n, ok := t.limiter.Allow(reason); ok {
		t.log.Warn("peer traffic refused", "reason", reason, "detail", msg, "not_logged_since_last", n)
	}
}

func hexProof(secret []byte, clusterID, from, to uint64) string {
	return hex.EncodeToString(Proof(secret, clusterID, from, to))
}
