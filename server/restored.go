package server

import (
	"encoding/binary"
	"fmt"

	"github.com/dkv-io/dkv/internal/backup/restore"
	"github.com/dkv-io/dkv/internal/dkverr"
)

// restoredCluster, for a data dir built by 'dkv snapshot restore', checks
// that this member starts as the member and in the membership it was
// restored for, and takes the cluster id the restore chose (its own, not
// the backed-up cluster's).
func (s *Server) restoredCluster(ms []member) error {
	cid, ok, err := s.store.Meta(restore.MetaRestoredClusterID)
	if err != nil || !ok {
		return err
	}
	wantIC, _, _ := s.store.Meta(restore.MetaRestoredInitialCluster)
	wantName, _, _ := s.store.Meta(restore.MetaRestoredName)
	var ic string
	for i, m := range ms {
		if i > 0 {
			ic += ","
		}
		ic += m.name + "=" + m.peerURL
	}
	norm, _, err := restore.NormalizeInitialCluster(ic)
	if err != nil {
		return err
	}
	if norm != string(wantIC) || s.cfg.Name != string(wantName) {
		return dkverr.New(dkverr.InvalidInput, "data dir %s was restored for member %q of --initial-cluster %s, but this is member %q of %s: start it with the --name and --initial-cluster given to 'dkv snapshot restore'",
			s.cfg.DataDir, wantName, wantIC, s.cfg.Name, norm)
	}
	if len(cid) != 8 {
		return fmt.Errorf("data dir %s: restored cluster id is %d bytes, want 8", s.cfg.DataDir, len(cid))
	}
	s.clusterID = binary.BigEndian.Uint64(cid)
	return nil
}
