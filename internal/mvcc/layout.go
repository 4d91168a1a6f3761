package mvcc

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/dkv-io/dkv/internal/keyrange"
	"github.com/dkv-io/dkv/internal/keys"
)

// Layouts of the MVCC keyspace. Reads of every layout go through the
// history records (s/mh), which every layout writes; the layouts differ
// in what a write adds beside them.
//
//	LayoutLatestAndHistory (2): each put also writes the key's latest
//	record under s/mk, a second copy of the value, and a delete removes
//	it. Every DKV before 0.3.0 reads the keyspace through s/mk only.
//	LayoutValueOnce (3): the value is written once, in its history
//	record; the newest version of a key is the first record of its
//	history group, so a read at the current revision is one seek.
//
// A store starts in layout 2 and moves to 3 by one replicated command
// (UpgradeLayout), which the cluster's leader proposes once every member
// runs a build that reads layout 3: a member of an older build would
// find no s/mk records and serve an empty keyspace.
const (
	LayoutLatestAndHistory = 2
	LayoutValueOnce        = 3
)

var keyLayout = keys.MVCCLayout

func readLayout(r pebble.Reader) (int, error) {
	v, err := readInt(r, keyLayout)
	if err != nil {
		return 0, err
	}
	switch {
	case v == 0:
		return LayoutLatestAndHistory, nil
	case v == LayoutValueOnce:
		return int(v), nil
	}
	return 0, fmt.Errorf("mvcc: the keyspace is in layout %d and this build knows layouts %d and %d", v, LayoutLatestAndHistory, LayoutValueOnce)
}

// Layout is the layout of the state being applied.
func (s *Store) Layout() int { return int(s.layout.Load()) }

// UpgradeLayout moves the keyspace to LayoutValueOnce in b: it drops
// every latest record and records the layout. It reports whether
// anything changed (false: already there). Call it on the apply
// goroutine, as a command of its own: later commands in b write the new
// layout.
func (s *Store) UpgradeLayout(b *pebble.Batch) (bool, error) {
	if s.layout.Load() >= LayoutValueOnce {
		return false, nil
	}
	// A range deletion costs every later read until compactions drop
	// it, so it is written only when there are latest records to drop
	// (not in a new cluster, which moves to layout 3 as it starts).
	it, err := b.NewIter(&pebble.IterOptions{LowerBound: prefixLatest, UpperBound: keyrange.PrefixEnd(prefixLatest)})
	if err != nil {
		return false, err
	}
	some := it.First()
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return false, err
	}
	if some {
		if err := b.DeleteRange(prefixLatest, keyrange.PrefixEnd(prefixLatest), nil); err != nil {
			return false, err
		}
	}
	if err := b.Set(keyLayout, binary.BigEndian.AppendUint64(nil, LayoutValueOnce), nil); err != nil {
		return false, err
	}
	s.layout.Store(LayoutValueOnce)
	return true, nil
}
