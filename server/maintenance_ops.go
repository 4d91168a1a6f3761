package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/server/grpcapi"
)

// DefaultCorruptCheckInterval is how often members compare state hashes
// unless Config.CorruptCheckInterval says otherwise.
const DefaultCorruptCheckInterval = 5 * time.Minute

// disarmAlarm clears alarm a through raft, on an operator's request.
func (s *Server) disarmAlarm(ctx context.Context, a *dkvpb.AlarmMember) error {
	pr := &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Alarm{Alarm: &dkvpb.AlarmRequest{
		MemberId: a.GetMemberId(), Active: false, Alarm: a.GetAlarm(), Reason: "disarmed by an operator",
	}}}
	if _, err := s.proposeRequest(ctx, pr); err != nil {
		return err
	}
	s.log.Warn("alarm disarmed by an operator", "alarm", a.GetAlarm().String(), "alarm_member", fmt.Sprintf("%x", a.GetMemberId()))
	return nil
}

// defragMu lets one defragmentation run at a time per process.
var defragMu sync.Mutex

// defragment truncates this member's raft log to its applied index,
// flushes the memtable and has Pebble compact the state range and the
// raft log (the Maintenance service's Defragment, which says more).
func (s *Server) defragment(ctx context.Context) (grpcapi.Defragmented, error) {
	if !defragMu.TryLock() {
		return grpcapi.Defragmented{}, dkverr.New(dkverr.Conflict, "a defragmentation is already running on this member")
	}
	defer defragMu.Unlock()
	if err := s.waitPurged(ctx); err != nil {
		return grpcapi.Defragmented{}, dkverr.New(dkverr.Unavailable, "defragment: waiting for the history below the compact revision to be purged: %v", err)
	}
	before := s.dbSize()
	start := time.Now()
	if err := s.reclaim(); err != nil {
		return grpcapi.Defragmented{}, dkverr.New(dkverr.Internal, "defragment: %v", err)
	}
	took := time.Since(start)
	// The size after is read once the files the compaction replaced are
	// deleted (a few milliseconds), not while they still sit beside
	// their replacements.
	s.store.AwaitObsoleteDeleted(ctx, 5*time.Second)
	d := grpcapi.Defragmented{Before: before, After: s.dbSize(), Took: took}
	s.log.Info("defragmented", "db_size_before", d.Before, "db_size_after", d.After, "took", d.Took)
	return d, nil
}

// dbSize is what the quota compares and status reports (storage.DBSize).
func (s *Server) dbSize() int64 {
	return int64(s.store.DBSize())
}

// dbInUse is what the database's live files take (storage.LiveBytes).
func (s *Server) dbInUse() int64 { return int64(s.store.LiveBytes()) }
