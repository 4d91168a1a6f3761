package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
)

// DefaultCorruptCheckInterval is how often members compare state hashes
// unless Config.CorruptCheckInterval says otherwise.
const DefaultCorruptCheckInterval = 5 * time.Minute

// Alarm lists the raised alarms or disarms those selected (through raft,
// one proposal per alarm). A NOSPACE alarm disarmed while its member
// still measures too little space is raised again by the next
// measurement, a CORRUPT one by the next divergence check if the member
// still differs.
func (m *maintenanceService) Alarm(ctx context.Context, req *dkvpb.AlarmActionRequest) (*dkvpb.AlarmResponse, error) {
	s := m.s
	if err := s.node.WaitLinearizable(ctx); err != nil {
		return nil, err
	}
	switch req.GetAction() {
	case dkvpb.AlarmActionRequest_GET:
	case dkvpb.AlarmActionRequest_DISARM:
		for _, a := range s.sm.Alarms().List() {
			if req.GetMemberId() != 0 && a.GetMemberId() != req.GetMemberId() {
				continue
			}
			if req.GetAlarm() != dkvpb.AlarmType_ALARM_TYPE_NONE && a.GetAlarm() != req.GetAlarm() {
				continue
			}
			pr := &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Alarm{Alarm: &dkvpb.AlarmRequest{
				MemberId: a.GetMemberId(), Active: false, Alarm: a.GetAlarm(), Reason: "disarmed by an operator",
			}}}
			if _, err := s.proposeRequest(ctx, pr); err != nil {
				return nil, err
			}
			s.log.Warn("alarm disarmed by an operator", "alarm", a.GetAlarm().String(), "alarm_member", fmt.Sprintf("%x", a.GetMemberId()))
		}
	default:
		return nil, dkverr.New(dkverr.InvalidInput, "alarm action %d is not GET (0) or DISARM (1)", req.GetAction())
	}
	return &dkvpb.AlarmResponse{Header: s.header(0), Alarms: s.sm.Alarms().List()}, nil
}

// defragMu lets one defragmentation run at a time per process.
var defragMu sync.Mutex

// Defragment truncates this member's raft log to its applied index,
// flushes the memtable and has Pebble compact the state range and the
// raft log, which drops deleted and compacted-away data and gives the
// space back. A follower behind the truncated log is sent a snapshot. It is Pebble's manual compaction: it runs beside reads
// and writes, which only compete with it for the disk and CPU.
func (m *maintenanceService) Defragment(ctx context.Context, _ *dkvpb.DefragmentRequest) (*dkvpb.DefragmentResponse, error) {
	s := m.s
	if !defragMu.TryLock() {
		return nil, dkverr.New(dkverr.Conflict, "a defragmentation is already running on this member")
	}
	defer defragMu.Unlock()
	if err := s.waitPurged(ctx); err != nil {
		return nil, dkverr.New(dkverr.Unavailable, "defragment: waiting for the history below the compact revision to be purged: %v", err)
	}
	before := s.dbSize()
	start := time.Now()
	if err := s.reclaim(); err != nil {
		return nil, dkverr.New(dkverr.Internal, "defragment: %v", err)
	}
	took := time.Since(start)
	s.log.Info("defragmented", "db_size_before", before, "db_size_after", s.dbSize(), "took", took)
	return &dkvpb.DefragmentResponse{Header: s.header(0), DbSizeBefore: before, DbSizeAfter: s.dbSize(), TookMs: took.Milliseconds()}, nil
}

// dbInUse is what the database's live files take (storage.LiveBytes).
func (s *Server) dbInUse() int64 { return int64(s.store.LiveBytes()) }

// dbSize is what the quota compares and status reports (storage.DBSize).
func (s *Server) dbSize() int64 {
	return int64(s.store.DBSize())
}
