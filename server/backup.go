package server

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dkv-io/dkv/internal/backup"
)

// Scheduled backups (Config.BackupDir): the leader, and only the leader,
// writes a backup every BackupInterval into BackupDir, in the format of
// 'dkv snapshot save', and keeps the newest BackupKeep of them. A member
// that is not the leader when the time comes skips that one; after a
// leader change the new leader takes over on its own schedule.

const backupPrefix, backupSuffix = "dkv-backup-", ".snap"

func (s *Server) startBackups() {
	if s.cfg.BackupDir == "" {
		return
	}
	s.wg.Add(1)
	go s.backupLoop()
}

func (s *Server) backupLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.BackupInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stopc:
			return
		case <-t.C:
		}
		if !s.node.Status().IsLeader {
			continue
		}
		path, err := s.WriteBackup(s.cfg.BackupDir)
		if err != nil {
			s.log.Warn("scheduled backup failed", "dir", s.cfg.BackupDir, "err", err)
			continue
		}
		s.log.Info("scheduled backup written", "file", path)
		s.pruneBackups()
	}
}

// WriteBackup writes a backup of this member's state into dir and
// returns its path.
func (s *Server) WriteBackup(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	cp, err := s.takeCheckpoint()
	if err != nil {
		return "", err
	}
	defer cp.remove()
	now := time.Now().UTC()
	path := filepath.Join(dir, fmt.Sprintf("%s%s-r%d%s", backupPrefix, now.Format("20060102T150405.000Z"), cp.contents.Revision, backupSuffix))
	w, err := backup.Create(path)
	if err != nil {
		return "", err
	}
	if err := cp.writeTar(w); err != nil {
		w.Abort()
		return "", err
	}
	err = w.Finish(backup.Meta{
		Revision: cp.contents.Revision, CompactRevision: cp.contents.CompactRevision,
		AppliedIndex: cp.contents.AppliedIndex, KeyCount: cp.contents.KeyCount,
		MemberID: strconv.FormatUint(s.memberID, 10), MemberName: s.cfg.Name, ClusterID: strconv.FormatUint(s.clusterID, 10),
		Created: now, ServerVersion: Version,
	})
	if err != nil {
		return "", err
	}
	if _, err := backup.Verify(path); err != nil {
		return "", err
	}
	return path, nil
}

// pruneBackups removes all but the newest BackupKeep scheduled backups
// (their names sort by time).
func (s *Server) pruneBackups() {
	ents, err := os.ReadDir(s.cfg.BackupDir)
	if err != nil {
		return
	}
	var names []string
	for _, e := range ents {
		if n := e.Name(); strings.HasPrefix(n, backupPrefix) && strings.HasSuffix(n, backupSuffix) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for len(names) > s.cfg.BackupKeep {
		if err := os.Remove(filepath.Join(s.cfg.BackupDir, names[0])); err != nil {
			s.log.Warn("cannot remove an old backup", "file", names[0], "err", err)
		}
		names = names[1:]
	}
}
