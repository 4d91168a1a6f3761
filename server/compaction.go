package server

import (
	"context"
	"errors"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
)

// autoCompactLoop runs on every member but proposes only while leader: it
// compacts to keep the last AutoCompactRevisions revisions and/or the
// revisions of the last AutoCompactPeriod.
func (s *Server) autoCompactLoop() {
	defer s.wg.Done()
	if s.cfg.AutoCompactRevisions <= 0 && s.cfg.AutoCompactPeriod <= 0 {
		return
	}
	interval := time.Minute
	if p := s.cfg.AutoCompactPeriod; p > 0 && p/10 < interval {
		interval = max(p/10, 100*time.Millisecond)
	}
	if s.cfg.AutoCompactRevisions > 0 && s.cfg.AutoCompactPeriod <= 0 {
		interval = 5 * time.Second
	}
	type sample struct {
		at  time.Time
		rev int64
	}
	var samples []sample
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stopc:
			return
		case now := <-t.C:
			rev := s.kv.Revision()
			samples = append(samples, sample{now, rev})
			if !s.node.Status().IsLeader {
				continue
			}
			target := int64(0)
			if n := s.cfg.AutoCompactRevisions; n > 0 && rev-n > target {
				target = rev - n
			}
			if p := s.cfg.AutoCompactPeriod; p > 0 {
				// The newest sample at least p old: everything before it is
				// outside the window.
				cut := -1
				for i, smp := range samples {
					if now.Sub(smp.at) >= p {
						cut = i
					}
				}
				if cut >= 0 {
					if r := samples[cut].rev; target == 0 || r < target {
						target = r
					}
					samples = samples[cut:]
				} else if s.cfg.AutoCompactRevisions <= 0 {
					target = 0
				}
			}
			if target <= s.kv.CompactRevision() {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := s.grpcAPI().KV().Compact(ctx, &dkvpb.CompactRequest{Revision: target})
			cancel()
			if err != nil {
				s.log.Warn("auto-compaction failed", "revision", target, "err", err)
			} else {
				s.log.Info("auto-compacted", "revision", target)
			}
		}
	}
}

// waitPurged waits until the history purge has caught up with the
// compact revision, so that what a compaction freed is deleted before a
// defragmentation compacts the tables; bounded by ctx.
func (s *Server) waitPurged(ctx context.Context) error {
	comp := s.kv.CompactRevision()
	if s.purged.Load() >= comp {
		return nil
	}
	select {
	case s.purgeKick <- struct{}{}:
	default:
	}
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for s.purged.Load() < comp {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.stopc:
			return errors.New("member is stopping")
		case <-t.C:
		}
	}
	return nil
}

// purgeLoop physically removes history below the compact revision, in
// the background, on every member: reads below it are already refused, so
// this changes no visible state.
func (s *Server) purgeLoop() {
	defer s.wg.Done()
	var purged int64
	for {
		select {
		case <-s.stopc:
			return
		case <-s.purgeKick:
		}
		comp := s.kv.CompactRevision()
		if comp <= purged {
			continue
		}
		if err := s.kv.PurgeHistory(s.store.DB(), comp); err != nil {
			s.log.Warn("purge history", "err", err)
			continue
		}
		purged = comp
		s.purged.Store(comp)
		s.reclaimSpace()
	}
}
