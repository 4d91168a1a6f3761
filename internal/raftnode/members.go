package raftnode

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// memberSet answers IsMember for the transport, which drops traffic from
// anyone else before raft sees it: a message from a stranger that raft
// accepted could raise the term, depose the leader or, as a MsgApp,
// commit a write nobody proposed.
//
// A member is a voter or learner of the applied configuration, or one a
// conf change in the log (appended, not yet applied) is adding: a new
// member's first messages can arrive before this node applies its
// addition. A node that has applied no configuration yet (one that is
// joining) trusts the members it was told about (Config.KnownMembers).
type memberSet struct {
	ids atomic.Pointer[map[uint64]struct{}]

	mu      sync.Mutex
	applied *raftpb.ConfState
	pending map[uint64]uint64 // id -> index of the last conf change adding it
	known   []uint64
}

func (s *memberSet) contains(id uint64) bool {
	m := s.ids.Load()
	if m == nil {
		return false
	}
	_, ok := (*m)[id]
	return ok
}

// rebuild recomputes ids; s.mu is held.
func (s *memberSet) rebuild() {
	m := map[uint64]struct{}{}
	cs := s.applied
	for _, l := range [][]uint64{cs.GetVoters(), cs.GetLearners(), cs.GetVotersOutgoing(), cs.GetLearnersNext()} {
		for _, id := range l {
			m[id] = struct{}{}
		}
	}
	if len(m) == 0 {
		for _, id := range s.known {
			m[id] = struct{}{}
		}
	}
	for id := range s.pending {
		m[id] = struct{}{}
	}
	s.ids.Store(&m)
}

func (s *memberSet) setApplied(cs *raftpb.ConfState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.applied = cs
	s.rebuild()
}

// appended records the members that conf changes in ents add.
func (s *memberSet) appended(ents []*raftpb.Entry) {
	var adds map[uint64]uint64
	for _, e := range ents {
		if e.GetType() == raftpb.EntryNormal {
			continue
		}
		cc, err := decodeConfChange(e)
		if err != nil {
			continue
		}
		for _, ch := range cc.GetChanges() {
			switch ch.GetType() {
			case raftpb.ConfChangeAddNode, raftpb.ConfChangeAddLearnerNode:
				if adds == nil {
					adds = map[uint64]uint64{}
				}
				adds[ch.GetNodeId()] = e.GetIndex()
			}
		}
	}
	if len(adds) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == nil {
		s.pending = map[uint64]uint64{}
	}
	for id, idx := range adds {
		s.pending[id] = max(s.pending[id], idx)
	}
	s.rebuild()
}

// appliedTo forgets pending additions at or below index: applied, they
// are in the configuration (or were overwritten by a new leader's log).
func (s *memberSet) appliedTo(index uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == 0 {
		return
	}
	for id, idx := range s.pending {
		if idx <= index {
			delete(s.pending, id)
		}
	}
	s.rebuild()
}

func decodeConfChange(e *raftpb.Entry) (*raftpb.ConfChangeV2, error) {
	if e.GetType() == raftpb.EntryConfChange {
		c := &raftpb.ConfChange{}
		if err := proto.Unmarshal(e.GetData(), c); err != nil {
			return nil, err
		}
		return c.AsV2(), nil
	}
	c := &raftpb.ConfChangeV2{}
	if err := proto.Unmarshal(e.GetData(), c); err != nil {
		return nil, err
	}
	return c, nil
}

// IsMember reports whether id may send this node raft messages.
func (n *Node[R]) IsMember(id uint64) bool { return n.members.contains(id) }

// scanPendingConfChanges finds conf changes in the persisted log above
// applied (a restart), so their members are admitted before they apply.
func (n *Node[R]) scanPendingConfChanges(applied uint64) error {
	last, err := n.store.LastIndex()
	if err != nil {
		return err
	}
	for lo := applied + 1; lo <= last; {
		ents, err := n.store.Entries(lo, last+1, 16<<20)
		if err != nil {
			return fmt.Errorf("scan log for conf changes: %w", err)
		}
		if len(ents) == 0 {
			break
		}
		n.members.appended(ents)
		lo = ents[len(ents)-1].GetIndex() + 1
	}
	return nil
}

// logDropEvery: a message dropped as impossible is logged once per kind
// (and sender) per interval.
const logDropEvery = 10 * time.Second

// memberName names member id for a log line.
func (n *Node[R]) memberName(id uint64) string {
	if n.cfg.MemberName != nil {
		if name := n.cfg.MemberName(id); name != "" {
			return name
		}
	}
	return fmt.Sprintf("%x", id)
}

// checkAppend detects a log that differs from the leader's below this
// node's commit index. Raft cannot repair that: the leader's probe is
// answered "stale" for any index below the commit and rejected at it, so
// the two would ping-pong forever, the follower never catching up and
// nothing logged (seen after a forged MsgApp had committed an entry on
// one member only). Correct members can never produce it (the leader of a
// term holds every committed entry), so the message is dropped, the
// member says what happened, and it stays behind loudly, not silently.
//
// It reports whether m, a MsgApp, shows a committed log that diverges
// from its sender's, the current leader's; only the raft loop calls it.
func (n *Node[R]) checkAppend(m *raftpb.Message) bool {
	if m.GetType() != raftpb.MsgApp {
		return false
	}
	idx := m.GetIndex()
	if idx == 0 || m.GetFrom() != n.lead.Load() || m.GetTerm() != n.term.Load() || idx > n.committed.Load() {
		return false
	}
	t, err := n.store.Term(idx)
	if err != nil || t == m.GetLogTerm() {
		return false // compacted or not yet persisted: nothing to compare
	}
	n.stats.LogDivergence.Add(1)
	if skipped, ok := n.logLimit.Allow("diverged_append"); ok {
		n.log.Error("this member's committed raft log differs from the leader's: it cannot catch up and must be removed and re-added (docs/cluster.md)",
			"index", idx, "local_term", t, "leader_term_at_index", m.GetLogTerm(), "leader", n.memberName(m.GetFrom()), "commit", n.committed.Load(),
			"not_logged_since_last", skipped)
	}
	return true
}

// checkAck reports whether m, sent to this leader, acknowledges log
// entries the leader does not have, and drops it if so; only the raft
// loop calls it.
//
// Raft takes a successful MsgAppResp's index as the member's match index
// without checking it against its own log: past the log's end it finds
// no entry to send next, falls back to a snapshot, has none and panics
// ("need non-empty snapshot"), taking the leader down. A member whose log
// holds entries this leader never sent (a forged append committed there,
// a data dir from another cluster) answers every probe that way, and a
// forger with the peer secret can send it outright.
//
// Impossible here: a successful MsgAppResp of this leader's term whose
// index is past the leader's persisted last index. A member acknowledges
// only entries the leader of that term sent it, and every Ready's entries
// are persisted before the loop steps another message, so the persisted
// last index bounds every ack raft could have asked for. Everything else
// goes to raft, which handles it safely: a response from another term
// (ignored, or it deposes the leader), a rejection (its index must be the
// one raft probed, and the hint only lowers where raft probes next), and
// every heartbeat response (it carries no log position: raft reads only
// its read-index context, and ignores contexts it did not send).
func (n *Node[R]) checkAck(m *raftpb.Message) bool {
	if m.GetType() != raftpb.MsgAppResp || m.GetReject() || !n.isLeader.Load() || m.GetTerm() != n.term.Load() {
		return false
	}
	last, err := n.store.LastIndex()
	if err != nil || m.GetIndex() <= last {
		return false
	}
	n.stats.LogDivergence.Add(1)
	from := m.GetFrom()
	if skipped, ok := n.logLimit.Allow(fmt.Sprintf("ack_beyond_log/%x", from)); ok {
		n.log.Error("a member acknowledged raft entries this leader does not have; the acknowledgement was dropped. "+
			"Its log holds entries no leader of this cluster sent (a forged append, or a data dir from another cluster): "+
			"remove the member and add it back with an empty data dir (docs/cluster.md), and check who holds the peer secret",
			"peer", n.memberName(from), "peer_id", fmt.Sprintf("%x", from), "index", m.GetIndex(), "last_index", last, "term", m.GetTerm(),
			"not_logged_since_last", skipped)
	}
	return true
}
