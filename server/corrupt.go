package server

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/storage"
	"google.golang.org/grpc"
)

// Divergence detection. Every member at start (once ready),
// and the leader every Config.CorruptCheckInterval, compares its state
// with the other members': the MVCC keyspace's hash at one revision all of them
// have (HashKV at the lowest current revision), and the hash of the
// leases and locks, which have no history, wherever two members answered
// at the same applied index. A member whose hash differs from a strict
// majority of those that answered gets a CORRUPT alarm, proposed through
// raft like NOSPACE; without a majority every member that answered does
// (nobody can tell which copy is right). A member with a CORRUPT alarm
// refuses client requests (corruptGuard) until an operator replaces it
// and disarms the alarm (docs/operations.md).

// leaseLockStart and leaseLockEnd bound the lock ("s/k...") and lease
// ("s/l...") state, adjacent in the key registry (internal/keys).
var (
	leaseLockStart = []byte("s/k")
	leaseLockEnd   = []byte("s/m")
)

// stateHash hashes the lease and lock records in r, byte for byte: apply
// writes them deterministically, so equal logs give equal bytes.
func stateHash(r pebble.Reader) (uint64, error) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: leaseLockStart, UpperBound: leaseLockEnd})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	h := fnv.New64a()
	var buf []byte
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return 0, err
		}
		buf = binary.AppendUvarint(buf[:0], uint64(len(it.Key())))
		buf = append(buf, it.Key()...)
		buf = binary.AppendUvarint(buf, uint64(len(v)))
		buf = append(buf, v...)
		h.Write(buf)
	}
	return h.Sum64(), it.Error()
}

// hashKV is this member's HashKV at rev, with the state hash and applied
// index of the same point in time.
func (s *Server) hashKV(rev int64) (*dkvpb.HashKVResponse, error) {
	snap := s.store.DB().NewSnapshot()
	defer snap.Close()
	h, atRev, comp, err := s.kv.HashKV(snap, rev)
	if err != nil {
		return nil, err
	}
	applied, err := storage.AppliedIndex(snap)
	if err != nil {
		return nil, err
	}
	sh, err := stateHash(snap)
	if err != nil {
		return nil, err
	}
	return &dkvpb.HashKVResponse{Header: s.header(0), Hash: h, Revision: atRev, CompactRevision: comp, AppliedIndex: applied, StateHash: sh}, nil
}

func (s *Server) corruptLoop() {
	defer s.wg.Done()
	select {
	case <-s.ready:
	case <-s.stopc:
		return
	}
	t := time.NewTicker(s.cfg.CorruptCheckInterval)
	defer t.Stop()
	var lastErr string
	for first := true; ; first = false {
		// One checker is enough once running: each check reads every
		// key on every member. A diverged leader finds itself in the
		// minority as well as a diverged follower does.
		var err error
		if first || s.node.Status().IsLeader {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err = s.checkCorruption(ctx)
			cancel()
		}
		switch {
		case err == nil:
			lastErr = ""
		case err.Error() != lastErr:
			lastErr = err.Error()
			s.log.Warn("divergence check could not compare with every member", "err", err)
		}
		select {
		case <-s.stopc:
			return
		case <-t.C:
		}
	}
}

// peerHash is one member's answer.
type peerHash struct {
	id   uint64
	name string
	h    *dkvpb.HashKVResponse
}

// hashPeer is a member the check asks.
type hashPeer struct {
	m  *dkvpb.Member
	cc dkvpb.ClusterClient
}

// hashAll asks this member and every peer for HashKV at rev, all at once.
// A Compacted error (from anyone) is returned; other failures of a peer
// are listed in errs and leave it out.
func (s *Server) hashAll(ctx context.Context, rev int64, peers []hashPeer) ([]peerHash, []string, error) {
	type answer struct {
		h   *dkvpb.HashKVResponse
		err error
	}
	answers := make([]answer, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := p.cc.HashKV(s.withMemberProof(ctx, dkvpb.Cluster_HashKV_FullMethodName), &dkvpb.HashKVRequest{Revision: rev})
			if err != nil {
				err = dkverr.FromGRPC(err)
			}
			answers[i] = answer{h, err}
		}()
	}
	own, ownErr := s.hashKV(rev)
	wg.Wait()
	if ownErr != nil {
		return nil, nil, ownErr
	}
	hashes := []peerHash{{s.memberID, s.cfg.Name, own}}
	var errs []string
	for i, a := range answers {
		switch {
		case a.err == nil:
			hashes = append(hashes, peerHash{peers[i].m.GetId(), peers[i].m.GetName(), a.h})
		case dkverr.CodeOf(a.err) == dkverr.Compacted:
			return nil, nil, a.err
		default:
			errs = append(errs, fmt.Sprintf("%s: %v", peers[i].m.GetName(), a.err))
		}
	}
	return hashes, errs, nil
}

// checkCorruption runs one comparison. An error means it could not
// compare with some member (down, refused); the members that answered
// are still compared.
func (s *Server) checkCorruption(ctx context.Context) error {
	ms, err := s.sm.Latest().Members()
	if err != nil {
		return err
	}
	var peers []hashPeer
	var errs []string
	for _, m := range ms {
		if m.GetId() == s.memberID || m.GetClientUrl() == "" {
			continue
		}
		conn, err := grpc.NewClient("passthrough:///"+m.GetClientUrl(), s.memberDialCreds())
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", m.GetName(), err))
			continue
		}
		defer conn.Close()
		peers = append(peers, hashPeer{m, dkvpb.NewClusterClient(conn)})
	}
	if len(peers) == 0 {
		return joinErrs(errs)
	}
	// A revision every member has: the lowest current one.
	rev := s.kv.Revision()
	var live []hashPeer
	for _, p := range peers {
		st, err := p.cc.Status(s.withMemberProof(ctx, dkvpb.Cluster_Status_FullMethodName), &dkvpb.StatusRequest{})
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", p.m.GetName(), dkverr.FromGRPC(err)))
			continue
		}
		if st.GetRevision() <= 0 {
			// A reply without details (a caller without root when auth
			// is on; an empty store is at revision 1): nothing to compare.
			continue
		}
		rev = min(rev, st.GetRevision())
		live = append(live, p)
	}
	if len(live) == 0 {
		return joinErrs(errs)
	}
	if rev <= 0 {
		return joinErrs(errs)
	}
	// The lease and lock hash needs the members at one applied index,
	// which under writes moves all the time. Each try asks every member
	// at once, so each takes its snapshot within a round trip of the
	// others' (asked one after the other, on a large store the snapshots
	// were a whole HashKV apart and never lined up under writes). Up to
	// three tries: each reads every key on every member. The KV hash
	// compares at rev anyway.
	var hashes []peerHash
	for try := 0; try < 3; try++ {
		var err error
		hashes, errs, err = s.hashAll(ctx, rev, live)
		if err != nil {
			if dkverr.CodeOf(err) == dkverr.Compacted {
				return nil // compacted meanwhile: next time
			}
			return err
		}
		if sameApplied(hashes) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	for id, why := range diverged(hashes, len(ms)) {
		if _, raised := s.sm.Alarms().Corrupt(id); raised {
			continue
		}
		s.log.Error("CORRUPT: a member's state diverged from the others'; it refuses client requests until an operator replaces it",
			"diverged_member", fmt.Sprintf("%x", id), "reason", why)
		req := &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Alarm{Alarm: &dkvpb.AlarmRequest{
			MemberId: id, Active: true, Reason: why, Alarm: dkvpb.AlarmType_ALARM_TYPE_CORRUPT,
		}}}
		if _, err := s.proposeRequest(ctx, req); err != nil {
			return fmt.Errorf("propose the CORRUPT alarm of member %x: %w", id, err)
		}
	}
	return joinErrs(errs)
}

func sameApplied(hs []peerHash) bool {
	for _, h := range hs {
		if h.h.GetAppliedIndex() != hs[0].h.GetAppliedIndex() {
			return false
		}
	}
	return true
}

// diverged decides, from the answers of a cluster of members members,
// which members diverged and why: a member outside a strict majority of
// equal hashes, or every member when all answered and there is no
// majority. Without a majority among fewer answers it decides nothing (a
// member that did not answer in time may hold the majority's hash; the
// next check asks again), so a healthy member is not taken out of
// service by a split it cannot be blamed for. The KV hashes are compared at one revision; the
// lease and lock hashes among the members at the most common applied
// index, if at least two are.
func diverged(hs []peerHash, members int) map[uint64]string {
	out := map[uint64]string{}
	vote := func(what string, group []peerHash, key func(peerHash) uint64) {
		if len(group) < 2 {
			return
		}
		count := map[uint64]int{}
		for _, h := range group {
			count[key(h)]++
		}
		if len(count) == 1 {
			return
		}
		var desc []string
		for _, h := range group {
			desc = append(desc, fmt.Sprintf("%s %016x", h.name, key(h)))
		}
		sort.Strings(desc)
		detail := what + ": " + strings.Join(desc, ", ")
		var majority uint64
		found := false
		for k, n := range count {
			if 2*n > len(group) {
				majority, found = k, true
			}
		}
		if !found && len(group) < members {
			return
		}
		for _, h := range group {
			if !found || key(h) != majority {
				if _, ok := out[h.id]; !ok {
					out[h.id] = detail
				}
			}
		}
	}
	if len(hs) == 0 {
		return out
	}
	vote(fmt.Sprintf("KV hash at revision %d differs", hs[0].h.GetRevision()), hs, func(h peerHash) uint64 { return h.h.GetHash() })
	byIndex := map[uint64][]peerHash{}
	var best uint64
	for _, h := range hs {
		ai := h.h.GetAppliedIndex()
		byIndex[ai] = append(byIndex[ai], h)
		if len(byIndex[ai]) > len(byIndex[best]) {
			best = ai
		}
	}
	vote(fmt.Sprintf("lease and lock hash at applied index %d differs", best), byIndex[best], func(h peerHash) uint64 { return h.h.GetStateHash() })
	return out
}

func joinErrs(errs []string) error {
	if len(errs) == 0 {
		return nil
	}
	return errors.New(strings.Join(errs, "; "))
}

// corruptRefusal is the error a member with a CORRUPT alarm answers
// client requests with; nil when it has none.
func (s *Server) corruptRefusal() error {
	if s.sm == nil {
		return nil
	}
	why, ok := s.sm.Alarms().Corrupt(s.memberID)
	if !ok {
		return nil
	}
	return dkverr.New(dkverr.Unavailable, "member %x has a CORRUPT alarm: its state diverged from the cluster's (%s); it refuses client requests until it is replaced (remove it, re-add it with an empty data dir, then 'dkv alarm disarm'; see docs/operations.md)", s.memberID, why)
}

// corruptExempt are the calls a diverged member still answers: what an
// operator needs to see and repair it.
var corruptExempt = map[string]bool{
	dkvpb.Cluster_Status_FullMethodName:         true,
	dkvpb.Cluster_HashKV_FullMethodName:         true,
	dkvpb.Cluster_MemberList_FullMethodName:     true,
	dkvpb.Cluster_MemberRemove_FullMethodName:   true,
	dkvpb.Cluster_LeaderTransfer_FullMethodName: true,
	dkvpb.Maintenance_Alarm_FullMethodName:      true,
	dkvpb.Maintenance_Snapshot_FullMethodName:   true,
	dkvpb.Maintenance_Defragment_FullMethodName: true,
	dkvpb.Auth_Authenticate_FullMethodName:      true,
	dkvpb.Auth_AuthStatus_FullMethodName:        true,
}

func (s *Server) unaryCorrupt(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !corruptExempt[info.FullMethod] {
		if err := s.corruptRefusal(); err != nil {
			return nil, err
		}
	}
	return handler(ctx, req)
}

func (s *Server) streamCorrupt(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !corruptExempt[info.FullMethod] {
		if err := s.corruptRefusal(); err != nil {
			return err
		}
	}
	return handler(srv, ss)
}
