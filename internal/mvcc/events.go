package mvcc

import (
	"bytes"
	"encoding/binary"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/keyrange"
)

// Read-side helpers for the watch hub: replaying past revisions as events
// from the change log (s/mr) and the history (s/mh).

// Counters returns the revision and the compact revision stored in r.
// Reading them from the same snapshot as the history makes the compaction
// check exact: PurgeHistory never removes what r still promises.
func Counters(r pebble.Reader) (rev, compact int64, err error) {
	return readCounters(r)
}

// CompactedError is the Compacted error for a read of rev when the compact
// revision is comp; it carries "compact_revision" in its metadata.
func CompactedError(rev, comp int64) error { return compactedErr(rev, comp) }

// ReadEvents replays the events of revisions [from, to] recorded in r, in
// revision order and, within a revision, in the order they were made:
// fn is called once per revision that changed at least one key for which
// match reports true, with those events. With withPrev, each event carries
// the key's previous version. Values are copies. fn returning false stops
// the replay. The caller checks that from >= the compact revision of r:
// below it the change log is gone and deletes can no longer be replayed
// (and from > it for prev_kv: the versions before it are gone).
func ReadEvents(r pebble.Reader, from, to int64, match func(key []byte) bool, withPrev bool, fn func(rev int64, evs []Event) bool) error {
	if from > to {
		return nil
	}
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: changeKey(from), UpperBound: changeKey(to + 1)})
	if err != nil {
		return err
	}
	defer it.Close()
	var hist *pebble.Iterator
	defer func() {
		if hist != nil {
			hist.Close()
		}
	}()
	var kbuf []byte
	for valid := it.First(); valid; valid = it.Next() {
		k := it.Key()
		if len(k) != len(prefixChanges)+8 {
			return errCorrupt
		}
		rev := int64(binary.BigEndian.Uint64(k[len(prefixChanges):]))
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		var evs []Event
		var ierr error
		err = DecodeChanges(v, func(put bool, key []byte) {
			if ierr != nil || !match(key) {
				return
			}
			key = append([]byte(nil), key...)
			ev := Event{Type: EventDelete, KV: &dkvpb.KeyValue{Key: key, ModRevision: rev}}
			if put {
				ev.Type = EventPut
				var rec record
				kbuf = histKey(kbuf, key, rev)
				hv, c, gerr := r.Get(kbuf)
				if gerr != nil {
					ierr = gerr
					return
				}
				live, derr := decodeHist(hv, rev, &rec)
				if derr == nil && !live {
					derr = errCorrupt
				}
				if derr != nil {
					c.Close()
					ierr = derr
					return
				}
				rec.value = append([]byte(nil), rec.value...)
				c.Close()
				ev.KV = rec.kv(key)
			}
			if withPrev {
				if hist == nil {
					hist, ierr = r.NewIter(&pebble.IterOptions{LowerBound: prefixHistory, UpperBound: keyrange.PrefixEnd(prefixHistory)})
					if ierr != nil {
						return
					}
				}
				ev.PrevKV, ierr = prevVersion(hist, key, rev)
			}
			evs = append(evs, ev)
		})
		if err == nil {
			err = ierr
		}
		if err != nil {
			return err
		}
		if len(evs) > 0 && !fn(rev, evs) {
			return nil
		}
	}
	return it.Error()
}

// prevVersion returns the newest live version of key below rev, nil if the
// key did not exist just before rev.
func prevVersion(it *pebble.Iterator, key []byte, rev int64) (*dkvpb.KeyValue, error) {
	if rev <= 1 {
		return nil, nil
	}
	seek := histKey(nil, key, rev-1)
	group := seek[:len(seek)-8]
	if !it.SeekGE(seek) {
		return nil, it.Error()
	}
	k := it.Key()
	if len(k) != len(group)+8 || !bytes.HasPrefix(k, group) {
		return nil, nil
	}
	mod := int64(^binary.BigEndian.Uint64(k[len(k)-8:]))
	v, err := it.ValueAndErr()
	if err != nil {
		return nil, err
	}
	var rec record
	live, err := decodeHist(v, mod, &rec)
	if err != nil || !live {
		return nil, err
	}
	rec.value = append([]byte(nil), rec.value...)
	return rec.kv(append([]byte(nil), key...)), nil
}
