package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/state"
	"github.com/dkv-io/dkv/internal/storage"
)

// The NOSPACE alarm, after etcd's: a member whose disk's free space falls
// below Config.SpaceReserveBytes, or whose database grows over
// Config.QuotaBytes, proposes an alarm through raft; while any member's
// alarm is raised, every member refuses the writes that add data (put,
// counter, a txn with a put, lease grant, lock acquire) with NoSpace, both
// before proposing and, deterministically, in apply. Reads, deletes,
// compaction, lease keep-alives and revokes and lock releases go on, so an
// operator can free space. The member clears its alarm (again through
// raft) once it measures enough space, and writes resume.
//
// Until the alarm is committed the member also refuses such writes on its
// own (localFull), and the ballast file (storage.Options.BallastBytes)
// absorbs what is already in flight: at ENOSPC Pebble's write is retried
// after the ballast is deleted, instead of failing the commit pipeline.

// checkSpace refuses, before proposing, a write the alarm would refuse;
// cmd is req's row in the command registry.
func (s *Server) checkSpace(cmd *state.Command, req *dkvpb.InternalRequest) error {
	if !cmd.GrowsData(req) {
		return nil
	}
	if why := s.sm.Alarms().Describe(); why != "" {
		return state.NoSpaceError(why)
	}
	if why, _ := s.localFull.Load().(string); why != "" {
		return state.NoSpaceError(fmt.Sprintf("member %x: %s", s.memberID, why))
	}
	return nil
}

// spaceReserve is the free space below which this member raises the
// alarm, on a filesystem of total bytes: --space-reserve-bytes if set
// (negative: none), else DefaultSpaceReserveBytes but at most an eighth
// of the filesystem, so that on a small one the data, not the reserve,
// is what fills it.
func (s *Server) spaceReserve(total uint64) uint64 {
	switch r := s.cfg.SpaceReserveBytes; {
	case r > 0:
		return uint64(r)
	case r < 0:
		return 0
	}
	return min(uint64(DefaultSpaceReserveBytes), total/8)
}

// spaceState is what one measurement found: why writes must stop ("" if
// they need not) and whether there is room to restore the ballast.
func (s *Server) measureSpace() (why string, ballastRoom bool, err error) {
	du, err := s.store.DiskUsage()
	if err != nil {
		return "", false, err
	}
	reserve := s.spaceReserve(du.TotalBytes)
	ballast := uint64(s.store.BallastBytes())
	// What the next flush of the write-ahead log will take is not free:
	// without it a node stopped now could not open again.
	free := du.AvailBytes - min(du.AvailBytes, du.UnflushedBytes)
	switch {
	case reserve > 0 && free < reserve:
		why = fmt.Sprintf("free disk space %s (%s once the write-ahead log is flushed) is below the reserve %s (--space-reserve-bytes)",
			storage.FormatBytes(du.AvailBytes), storage.FormatBytes(free), storage.FormatBytes(reserve))
	case s.cfg.QuotaBytes > 0 && du.LiveBytes > uint64(s.cfg.QuotaBytes):
		why = fmt.Sprintf("database size %s is over the quota %s (--quota-bytes)",
			storage.FormatBytes(du.LiveBytes), storage.FormatBytes(uint64(s.cfg.QuotaBytes)))
	}
	ballastRoom = free >= reserve+ballast
	if why == "" && !ballastRoom && s.ballastOwed.Load() && ballast > 0 {
		// The ballast's space looks free, but it is the reserve that
		// absorbs the next ENOSPC; without it that write would fail
		// Pebble's commit pipeline.
		why = fmt.Sprintf("the disk was full and the ballast file was released; %s free (once the write-ahead log is flushed) is too little to restore it: %s needed (the reserve plus the %s ballast)",
			storage.FormatBytes(free), storage.FormatBytes(reserve+ballast), storage.FormatBytes(ballast))
	}
	return why, ballastRoom, nil
}

// alarmProposeTimeout bounds one proposal of an alarm change. A
// proposal lost (a leader change) is retried at the next check after
// it; short, so that an alarm clears within a couple of check
// intervals of space being freed.
func (s *Server) alarmProposeTimeout() time.Duration {
	return min(max(2*s.cfg.SpaceCheckInterval, time.Second), 5*time.Second)
}

// raiseAlarmBeforeReady commits this member's alarm if it started short
// of space (localFull) and the alarm is not raised yet; waitReady calls
// it before reporting ready, so that the alarm is in force on every
// member, not just this one's local refusal, from the first request.
func (s *Server) raiseAlarmBeforeReady(ctx context.Context) error {
	why, _ := s.localFull.Load().(string)
	if why == "" || s.sm.Alarms().Raised(s.memberID) {
		return nil
	}
	res, err := s.proposeRequest(ctx, &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Alarm{Alarm: &dkvpb.AlarmRequest{
		MemberId: s.memberID, Active: true, Reason: why,
	}}})
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return err
	}
	s.log.Warn("NOSPACE alarm raised for the cluster before reporting ready", "reason", why)
	return nil
}

// spaceLoop measures the disk every SpaceCheckInterval (and at once when
// Pebble met ENOSPC), raises and clears this member's alarm, and puts the
// ballast back once there is room.
func (s *Server) spaceLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.SpaceCheckInterval)
	defer t.Stop()
	var lastErr string
	for {
		why, room, err := s.measureSpace()
		switch {
		case err != nil:
			if err.Error() != lastErr {
				s.log.Warn("cannot measure disk space", "err", err)
				lastErr = err.Error()
			}
		case s.diskFullHit.Swap(false) && why == "":
			why = "the disk filled up (ENOSPC); the ballast file was released"
			fallthrough
		default:
			s.updateAlarm(why, room)
		}
		select {
		case <-s.stopc:
			return
		case <-t.C:
		case <-s.spaceKick:
		}
	}
}

func (s *Server) updateAlarm(why string, ballastRoom bool) {
	prev, _ := s.localFull.Load().(string)
	s.localFull.Store(why)
	if why != "" && prev == "" {
		s.log.Warn("NOSPACE: refusing writes that add data", "reason", why)
	}
	raised := s.sm.Alarms().Raised(s.memberID)
	if (why != "") == raised {
		if why == "" && ballastRoom {
			if err := s.store.EnsureBallast(); err != nil {
				s.log.Warn("cannot restore the ballast file", "err", err)
			} else {
				s.ballastOwed.Store(false)
			}
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.alarmProposeTimeout())
	defer cancel()
	req := &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Alarm{Alarm: &dkvpb.AlarmRequest{
		MemberId: s.memberID, Active: why != "", Reason: why,
	}}}
	if _, err := s.proposeRequest(ctx, req); err != nil {
		// Measured again next interval.
		if !errors.Is(err, context.DeadlineExceeded) {
			s.log.Warn("cannot propose the NOSPACE alarm change", "active", why != "", "err", err)
		}
		return
	}
	if why == "" {
		s.log.Info("NOSPACE alarm cleared: writes resume")
	} else {
		s.log.Warn("NOSPACE alarm raised for the cluster", "reason", why)
	}
}

// onDiskFull runs inside Pebble's write path at ENOSPC, after the ballast
// is gone: note it and wake the monitor, nothing slow.
func (s *Server) onDiskFull() {
	s.diskFulls.Add(1)
	s.ballastOwed.Store(true)
	s.diskFullHit.Store(true)
	s.localFull.Store("the disk filled up (ENOSPC); the ballast file was released")
	select {
	case s.spaceKick <- struct{}{}:
	default:
	}
}

// onStorageFatal: Pebble cannot continue. The node stops serving; Failed
// reports why.
func (s *Server) onStorageFatal(err error) {
	s.failedOnce.Do(func() {
		s.failErr = err
		s.log.Error("stopping: storage cannot continue", "err", err)
		close(s.failed)
		if s.running.Load() {
			go s.Stop() // stop serving; the database is not closed
		}
		// Before that, Start fails or stays parked; Failed tells its caller.
	})
}

// reclaimSpace, after a history purge while this member is short of
// space, makes the freed space count: it truncates the raft log up to the
// applied index (slow followers then get a snapshot) and has Pebble flush
// and compact away deleted data. Outside an alarm Pebble's own background
// compactions do this in time.
func (s *Server) reclaimSpace() {
	if why, _ := s.localFull.Load().(string); why == "" && !s.sm.Alarms().Raised(s.memberID) {
		return
	}
	if err := s.reclaim(); err != nil {
		s.log.Warn("reclaiming disk space after compaction", "err", err)
	}
	select {
	case s.spaceKick <- struct{}{}:
	default:
	}
}

// reclaim truncates this member's raft log up to its applied index (a
// follower behind it is then sent a snapshot) and has Pebble flush and
// compact away deleted data and the log's entries: what a NOSPACE alarm
// and an operator's defragment need so that freed space shows on disk.
func (s *Server) reclaim() error {
	err := s.store.TruncateLogToApplied()
	if err == nil {
		err = s.store.Reclaim()
	}
	return err
}
