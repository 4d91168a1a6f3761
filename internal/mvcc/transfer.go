package mvcc

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/dkv-io/dkv/internal/keyrange"
	"github.com/dkv-io/dkv/internal/keys"
	"github.com/dkv-io/dkv/internal/lease"
)

// Moving the keyspace in and out of other stores' snapshot formats
// (package etcdsnap): Export reads every version a read can still reach,
// in revision order; a Loader writes such versions into an empty store.
// Neither goes through a Writer: they are offline conversions of a
// whole state, not commands (a Loader's output is a new cluster's
// initial state, as a restored backup is).

// Version is one version of a key: a put, or a delete (Tombstone, with
// only Key, Rev and Sub set). Sub orders the writes of one revision (a
// txn's), from 0. Key and Value are only valid during the callback
// that receives them.
type Version struct {
	Key                    []byte
	Rev, Sub               int64
	Tombstone              bool
	Create, Version, Lease int64
	Value                  []byte
}

// Export calls fn with every version of a key below end (nil: every
// key) that a read or a watch can still reach, in revision order (then
// Sub): for each key live at the compact revision, its version then;
// after it, every put and delete the change log records (Sub is the
// write's place in its revision, so it has gaps where keys at or after
// end were written). fn returning an error stops with that error.
//
// The versions at or below the compact revision are collected (keys and
// revisions, not values) and sorted before the first is sent; the rest
// stream from the change log.
func Export(r pebble.Reader, end []byte, fn func(v *Version) error) error {
	cur, comp, err := readCounters(r)
	if err != nil {
		return err
	}
	type base struct {
		rev int64
		key []byte
	}
	var bases []base
	if comp > 0 {
		err := scanHistory(r, span{start: []byte{}, end: end}, comp, func(key []byte, rec *record) bool {
			bases = append(bases, base{rec.mod, bytes.Clone(key)})
			return true
		})
		if err != nil {
			return err
		}
		slices.SortStableFunc(bases, func(a, b base) int {
			if c := cmp.Compare(a.rev, b.rev); c != 0 {
				return c
			}
			return bytes.Compare(a.key, b.key)
		})
	}
	var kbuf []byte
	var v Version
	send := func(key []byte, rev, sub int64) error {
		kbuf = histKey(kbuf, key, rev)
		val, closer, err := r.Get(kbuf)
		if err != nil {
			return fmt.Errorf("mvcc: history record of %q at revision %d: %w", key, rev, err)
		}
		defer closer.Close()
		var rec record
		live, err := decodeHist(val, rev, &rec)
		if err != nil {
			return err
		}
		v = Version{Key: key, Rev: rev, Sub: sub, Tombstone: !live}
		if live {
			v.Create, v.Version, v.Lease, v.Value = rec.create, rec.version, rec.lease, rec.value
		}
		return fn(&v)
	}
	// Sub-revisions of the base versions are numbered in key order: no
	// read or watch can tell them apart (a watch cannot start at or
	// below the compact revision), and the change log that recorded
	// their order may be purged.
	sub := int64(0)
	for i, b := range bases {
		if i > 0 && bases[i-1].rev == b.rev {
			sub++
		} else {
			sub = 0
		}
		if err := send(b.key, b.rev, sub); err != nil {
			return err
		}
	}
	if cur <= comp {
		return nil
	}
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: changeKey(comp + 1), UpperBound: keyrange.PrefixEnd(prefixChanges)})
	if err != nil {
		return err
	}
	defer it.Close()
	for valid := it.First(); valid; valid = it.Next() {
		k := it.Key()
		if len(k) != len(prefixChanges)+8 {
			return errCorrupt
		}
		rev := int64(binary.BigEndian.Uint64(k[len(prefixChanges):]))
		val, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		var keys [][]byte
		if err := DecodeChanges(val, func(_ bool, key []byte) { keys = append(keys, bytes.Clone(key)) }); err != nil {
			return err
		}
		for i, key := range keys {
			if end != nil && bytes.Compare(key, end) >= 0 {
				continue
			}
			if err := send(key, rev, int64(i)); err != nil {
				return err
			}
		}
	}
	return it.Error()
}

// loaderBatchBytes is how much a Loader buffers before committing.
const loaderBatchBytes = 32 << 20

// A Loader writes versions into an empty store's keyspace, as the
// commands that made them would have: the latest record of each live
// key, a history record per version, the change log per revision, the
// revision counters, the lease records and the keys' lease
// attachments. Versions come in revision order (then Sub order);
// Finish writes the counters and attaches keys to their leases.
type Loader struct {
	db      *pebble.DB
	b       *pebble.Batch
	rev     int64 // of the versions being gathered
	sub     int64
	changes []change
	kbuf    []byte
	vbuf    []byte
	leases  map[int64]bool
}

// NewLoader starts loading into db, which must hold no MVCC or lease
// state.
func NewLoader(db *pebble.DB) (*Loader, error) {
	for _, p := range [][]byte{prefixLatest, prefixHistory, prefixChanges, keyRevision, keys.LeaseRecordPrefix} {
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: keyrange.PrefixEnd(p)})
		if err != nil {
			return nil, err
		}
		some := it.First()
		if err := it.Close(); err != nil {
			return nil, err
		}
		if some {
			return nil, fmt.Errorf("mvcc: loader: the database already holds state under %q", p)
		}
	}
	return &Loader{db: db, b: db.NewBatch(), leases: map[int64]bool{}}, nil
}

// Lease writes a lease record. Leases may come before or after the
// versions whose keys they hold.
func (l *Loader) Lease(rec lease.Record) error {
	if err := lease.Set(l.b, &rec); err != nil {
		return err
	}
	l.leases[rec.ID] = true
	return l.maybeCommit()
}

// Add writes v. Its revision must not be below the previous version's,
// and within one revision its Sub must grow.
func (l *Loader) Add(v *Version) error {
	switch {
	case len(v.Key) == 0:
		return fmt.Errorf("mvcc: loader: a version at revision %d has an empty key", v.Rev)
	case v.Rev < 1:
		return fmt.Errorf("mvcc: loader: key %q has revision %d; revisions start at 1", v.Key, v.Rev)
	case v.Rev < l.rev || v.Rev == l.rev && v.Sub <= l.sub && len(l.changes) > 0:
		return fmt.Errorf("mvcc: loader: revision %d.%d of key %q comes after %d.%d: versions must come in revision order", v.Rev, v.Sub, v.Key, l.rev, l.sub)
	case !v.Tombstone && (v.Create < 1 || v.Create > v.Rev || v.Version < 1):
		return fmt.Errorf("mvcc: loader: key %q at revision %d has create revision %d and version %d; want 1 <= create <= %d and version >= 1", v.Key, v.Rev, v.Create, v.Version, v.Rev)
	}
	if v.Rev != l.rev {
		if err := l.flushRev(); err != nil {
			return err
		}
		l.rev = v.Rev
	}
	l.sub = v.Sub
	l.kbuf = latestKey(l.kbuf, v.Key)
	if v.Tombstone {
		if err := l.b.Delete(l.kbuf, nil); err != nil {
			return err
		}
		l.kbuf = histKey(l.kbuf, v.Key, v.Rev)
		if err := l.b.Set(l.kbuf, tombstoneValue, nil); err != nil {
			return err
		}
		l.changes = append(l.changes, change{kind: kindTombstone, key: bytes.Clone(v.Key)})
		return l.maybeCommit()
	}
	rec := record{create: v.Create, mod: v.Rev, version: v.Version, lease: v.Lease, value: v.Value}
	l.vbuf = appendLatest(l.vbuf[:0], &rec)
	if err := l.b.Set(l.kbuf, l.vbuf, nil); err != nil {
		return err
	}
	l.kbuf = histKey(l.kbuf, v.Key, v.Rev)
	l.vbuf = appendHistPut(l.vbuf[:0], &rec)
	if err := l.b.Set(l.kbuf, l.vbuf, nil); err != nil {
		return err
	}
	l.changes = append(l.changes, change{kind: kindPut, key: bytes.Clone(v.Key)})
	return l.maybeCommit()
}

// flushRev writes the change log entry of the revision gathered so far.
func (l *Loader) flushRev() error {
	if len(l.changes) == 0 {
		return nil
	}
	l.vbuf = appendChanges(l.vbuf[:0], l.changes)
	err := l.b.Set(changeKey(l.rev), l.vbuf, nil)
	l.changes = l.changes[:0]
	return err
}

func (l *Loader) maybeCommit() error {
	if l.b.Len() < loaderBatchBytes {
		return nil
	}
	if err := l.b.Commit(pebble.NoSync); err != nil {
		return err
	}
	l.b.Close()
	l.b = l.db.NewBatch()
	return nil
}

// LoadResult is what Finish found.
type LoadResult struct {
	// Revision and CompactRevision are the store's counters as written.
	Revision, CompactRevision int64
	// Keys is how many keys are live.
	Keys int64
	// Unleased counts the live keys naming a lease the load had no
	// record of: they keep the id but are attached to nothing, so no
	// expiry deletes them (as in etcd, whose restore warns of them).
	Unleased int64
}

// Finish writes the counters: the revision is the newest version's, or
// compact if that is higher (the versions after the compaction may all
// have been compacted away); then it attaches every live key to its
// lease, and commits (not synced: the caller syncs).
func (l *Loader) Finish(compact int64) (LoadResult, error) {
	if err := l.flushRev(); err != nil {
		return LoadResult{}, err
	}
	res := LoadResult{Revision: max(l.rev, compact, FirstRevision), CompactRevision: compact}
	err := l.b.Set(keyRevision, binary.BigEndian.AppendUint64(nil, uint64(res.Revision)), nil)
	if err == nil && compact > 0 {
		err = l.b.Set(keyCompact, binary.BigEndian.AppendUint64(nil, uint64(compact)), nil)
	}
	if err == nil {
		err = l.b.Commit(pebble.NoSync)
	}
	l.b.Close()
	l.b = nil
	if err != nil {
		return res, err
	}
	b := l.db.NewBatch()
	defer func() { b.Close() }()
	var ferr error
	err = scanLatest(l.db, span{start: []byte{}}, func(key []byte, rec *record) bool {
		res.Keys++
		if rec.lease == 0 {
			return true
		}
		if !l.leases[rec.lease] {
			res.Unleased++
			return true
		}
		if ferr = lease.Attach(b, rec.lease, key); ferr != nil {
			return false
		}
		if b.Len() >= loaderBatchBytes {
			if ferr = b.Commit(pebble.NoSync); ferr != nil {
				return false
			}
			b.Close()
			b = l.db.NewBatch()
		}
		return true
	})
	if err == nil {
		err = ferr
	}
	if err == nil {
		err = b.Commit(pebble.NoSync)
	}
	return res, err
}
