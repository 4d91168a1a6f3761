package mvcc

import (
	"bytes"
	"encoding/binary"

	"github.com/cockroachdb/pebble/v2"
	"github.com/dkv-io/dkv/internal/keyrange"
)

// purgeBatchKeys bounds the size of one purge batch.
const purgeBatchKeys = 4096

// PurgeHistory physically removes history that reads can no longer reach:
// for each key, every version older than the newest one at or below upTo,
// and that one too if it is a tombstone; and change-log entries below
// upTo. upTo is clamped to the compact revision persisted in db, so a
// purge never outruns a compaction that is applied but not yet committed.
// It runs outside the apply path in its own batches and is idempotent, so
// an interrupted purge is finished by the next one. Only records at or
// below the compact revision are touched, and Apply never writes those, so
// it is safe to run concurrently with Apply.
func (s *Store) PurgeHistory(db *pebble.DB, upTo int64) error {
	comp, err := readInt(db, keyCompact)
	if err != nil {
		return err
	}
	if upTo > comp {
		upTo = comp
	}
	if upTo <= 0 {
		return nil
	}
	snap := db.NewSnapshot()
	defer snap.Close()

	b := db.NewBatch()
	defer func() { b.Close() }()
	flush := func() error {
		if b.Empty() {
			return nil
		}
		if err := b.Commit(pebble.NoSync); err != nil {
			return err
		}
		b.Close()
		b = db.NewBatch()
		return nil
	}
	// Index entries are versioned exactly as history records (a group
	// per (value, key), kindTombstone for "no longer"), so they are
	// pruned by the same rule.
	for _, p := range [][]byte{prefixHistory, prefixIndexEntry} {
		del := func(k []byte) error {
			if err := b.Delete(k, nil); err != nil {
				return err
			}
			if b.Count() >= purgeBatchKeys {
				return flush()
			}
			return nil
		}
		if err := purgeGroups(snap, p, upTo, del); err != nil {
			return err
		}
	}
	if err := b.DeleteRange(prefixChanges, changeKey(upTo), nil); err != nil {
		return err
	}
	return flush()
}

// purgeGroups deletes, per group of versioned records under prefix
// (keys <group><^rev>), every record older than the newest one at or
// below upTo, and that one too if it is a tombstone.
func purgeGroups(snap *pebble.Snapshot, prefix []byte, upTo int64, del func(k []byte) error) error {
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: keyrange.PrefixEnd(prefix)})
	if err != nil {
		return err
	}
	defer it.Close()
	var group []byte
	keptOne := false // whether the newest version <= upTo of group was seen
	for valid := it.First(); valid; valid = it.Next() {
		k := it.Key()
		if len(k) < len(prefix)+10 {
			return errCorrupt
		}
		g := k[:len(k)-8]
		if !bytes.Equal(g, group) {
			group = append(group[:0], g...)
			keptOne = false
		}
		if rev := int64(^binary.BigEndian.Uint64(k[len(k)-8:])); rev > upTo {
			continue
		}
		if !keptOne {
			keptOne = true
			v, err := it.ValueAndErr()
			if err != nil {
				return err
			}
			if len(v) == 0 || v[0] != kindTombstone {
				continue // the version a read at upTo sees
			}
		}
		if err := del(k); err != nil {
			return err
		}
	}
	return it.Error()
}
