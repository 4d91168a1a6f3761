package storage

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/cockroachdb/pebble/v2"
)

// Format is the on-disk layout this build reads and writes: which records
// the state and the raft log are kept in, and how. A change of layout
// that an older build would misread (it would find no data where the new
// layout keeps it, and serve an empty keyspace) raises it, with a
// migration from the previous format at open.
const Format = 1

// formatMeta names the node-local record holding the data dir's format.
const formatMeta = "format"

// ErrNewerFormat is wrapped by Open's error for a data dir written by a
// newer build, whose layout this one cannot read.
var ErrNewerFormat = errors.New("data dir written by a newer DKV")

// checkFormat refuses a data dir of a newer format and records the
// current format in one that has none (every data dir before the
// record existed is format 1). Run before anything reads the state.
func (s *Storage) checkFormat() error {
	b, ok, err := s.Meta(formatMeta)
	if err != nil {
		return err
	}
	if !ok {
		return s.db.Set(metaKey(formatMeta), []byte(strconv.Itoa(Format)), pebble.Sync)
	}
	v, err := strconv.Atoi(string(b))
	if err != nil || v < 1 {
		return &DamageError{Dir: s.dir, Problem: fmt.Sprintf("the data dir's format record is %q, not a format number", b)}
	}
	if v > Format {
		return fmt.Errorf("%w: %s is in storage format %d and this build reads format %d at most; run the DKV release that wrote it (or a newer one), or restore a backup into a new data dir", ErrNewerFormat, s.dir, v, Format)
	}
	return nil
}
