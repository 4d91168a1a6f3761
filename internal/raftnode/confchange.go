package raftnode

import (
	"context"
	"errors"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/storage"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// confProposal is one membership change on its way into raft.
type confProposal struct {
	cc    raftpb.ConfChangeI
	errc  chan error
	index uint64 // where the leader appended it (set before errc fires)
}

// confTracker holds the conf changes this leader stepped into raft,
// waiting for the index they were appended at; only the raft loop touches
// it. They are answered in order, as their entries show up in a Ready.
type confTracker struct {
	pending []*confProposal
}

// add tracks p, which raft accepted on this leader.
func (c *confTracker) add(p *confProposal) { c.pending = append(c.pending, p) }

// appended answers a tracked proposal, with its index, for each conf
// change entry among ents (a Ready's entries to persist).
func (c *confTracker) appended(ents []*raftpb.Entry) {
	for _, e := range ents {
		if len(c.pending) == 0 {
			return
		}
		if e.GetType() != raftpb.EntryNormal {
			c.pending[0].index = e.GetIndex()
			c.pending[0].errc <- nil
			c.pending = c.pending[1:]
		}
	}
}

// softState fails every tracked proposal when this member is no longer
// the leader: they were not appended, and the proposer retries (it checks
// the applied configuration anyway).
func (c *confTracker) softState(ss *raft.SoftState) {
	if ss == nil || ss.RaftState == raft.StateLeader {
		return
	}
	for _, p := range c.pending {
		p.errc <- raft.ErrProposalDropped
	}
	c.pending = nil
}

// applied (ConfState reflects it).
func (n *Node[R]) ProposeConfChange(ctx context.Context, cc raftpb.ConfChangeI) error {
	for {
		p := &confProposal{cc: cc, errc: make(chan error, 1)}
		select {
		case n.confc <- p:
		case <-ctx.Done():
			return ctxErr(ctx, false)
		case <-n.stopc:
			return ErrStopped
		}
		var err error
		select {
		case err = <-p.errc:
		case <-ctx.Done():
			return ctxErr(ctx, true)
		case <-n.stopc:
			return ErrStopped
		}
		if errors.Is(err, raft.ErrProposalDropped) {
			if err := n.waitLeaderChange(ctx); err != nil {
				return err
			}
			continue
		}
		if errors.Is(err, errConfChangePending) {
			if err := n.WaitLinearizable(ctx); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if p.index > 0 {
			// Proposed on the leader at a known index: wait for it to
			// apply here (this works even when it removes this member).
			err = n.WaitApplied(ctx, p.index)
		} else {
			// Forwarded from a follower: a fresh read index covers it.
			err = n.WaitLinearizable(ctx)
		}
		if err != nil {
			return err
		}
		// raft silently turns a conf change into an empty entry while an
		// earlier one is not yet applied (and right after an election):
		// only the applied configuration says whether it took effect.
		if confChangeTook(n.confState.Load(), cc) {
			return nil
		}
		n.log.Debug("conf change was not applied by raft; retrying", "change", cc.AsV2().String())
		t := time.NewTimer(n.cfg.TickInterval)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return dkverr.New(dkverr.Unavailable, "membership change not applied before the deadline (another change was pending)")
		}
	}
}

// confChangeTook reports whether every change in cc is reflected in cs.
func confChangeTook(cs *raftpb.ConfState, cc raftpb.ConfChangeI) bool {
	in := func(ids []uint64, id uint64) bool {
		for _, x := range ids {
			if x == id {
				return true
			}
		}
		return false
	}
	for _, ch := range cc.AsV2().GetChanges() {
		id := ch.GetNodeId()
		voter := in(cs.GetVoters(), id)
		learner := in(cs.GetLearners(), id) || in(cs.GetLearnersNext(), id)
		switch ch.GetType() {
		case raftpb.ConfChangeAddNode:
			if !voter {
				return false
			}
		case raftpb.ConfChangeAddLearnerNode:
			if !learner {
				return false
			}
		case raftpb.ConfChangeRemoveNode:
			if voter || learner {
				return false
			}
		}
	}
	return true
}

// applyConfChange hands a committed conf change to raft and, with a batch,
// records the new ConfState and member table in it.
func (n *Node[R]) applyConfChange(b *pebble.Batch, e *raftpb.Entry) error {
	var cc raftpb.ConfChangeI
	var ctxData []byte
	if e.GetType() == raftpb.EntryConfChange {
		c := &raftpb.ConfChange{}
		if err := proto.Unmarshal(e.GetData(), c); err != nil {
			return err
		}
		cc, ctxData = c, c.GetContext()
	} else {
		c := &raftpb.ConfChangeV2{}
		if err := proto.Unmarshal(e.GetData(), c); err != nil {
			return err
		}
		cc, ctxData = c, c.GetContext()
	}
	cs := n.rn.ApplyConfChange(cc)
	n.confState.Store(cs)
	n.members.setApplied(cs)
	if b == nil {
		return nil
	}
	if err := storage.SetConfState(b, cs); err != nil {
		return err
	}
	if err := n.cfg.StateMachine.ApplyConfChange(b, cc.AsV2(), ctxData); err != nil {
		return err
	}
	return nil
}

// errConfChangePending is returned when raft refuses a conf change because
// an earlier one is not applied yet; the proposer retries.
var errConfChangePending = errors.New("another membership change is still being applied")

// stepConfChange proposes p.cc the way RawNode.ProposeConfChange does, but
// keeps the message's entries: raft replaces the entry with an empty normal
// one when it refuses the change.
func (n *Node[R]) stepConfChange(p *confProposal) error {
	typ, data, err := raftpb.MarshalConfChange(p.cc)
	if err != nil {
		return err
	}
	ents := []*raftpb.Entry{{Type: typ.Enum(), Data: data}}
	if err := n.rn.Step(&raftpb.Message{Type: raftpb.MsgProp.Enum(), From: new(n.cfg.ID), Entries: ents}); err != nil {
		return err
	}
	if ents[0].GetType() == raftpb.EntryNormal {
		return errConfChangePending
	}
	return nil
}
