package mvcc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/keyrange"
)

// visitFn receives each visible key in key order. key and rec.value are
// only valid during the call. Returning false stops the scan.
type visitFn func(key []byte, rec *record) bool

// scanLatest visits the live keys in sp: per key, the newest version in
// its history group, unless that is a tombstone. Every layout writes the
// history (layout.go), so this reads any of them.
func scanLatest(r pebble.Reader, sp span, fn visitFn) error {
	return scanLatestBuf(r, sp, nil, nil, fn)
}

// scanLatest is the package's scanLatest with the store's revision cache
// for a single key.
func (s *Store) scanLatest(r pebble.Reader, sp span, fn visitFn) error {
	return scanLatestBuf(r, sp, s.revs, nil, fn)
}

// latestSkipNexts is how many older versions of a key scanLatestBuf steps
// over with Next before it seeks past the key's group instead: a key
// read after a compaction has one version, a hot key many.
const latestSkipNexts = 4

// scanLatestBuf is scanLatest with a revision cache (may be nil) and a
// buffer for the iterator's bounds (the caller's scratch, unused after
// the call).
func scanLatestBuf(r pebble.Reader, sp span, revs *revCache, buf []byte, fn visitFn) error {
	if sp.single {
		return getLatestVersion(r, revs, sp.start, buf, fn)
	}
	if isEmpty(sp) {
		return nil
	}
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: histGroup(buf, sp.start), UpperBound: histBound(sp.end)})
	if err != nil {
		return err
	}
	var rec record
	var group, seek, kbuf []byte
	for valid := it.First(); valid; {
		k := it.Key()
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return err
		}
		key, mod, err := decodeHistKey(kbuf, k)
		if err != nil {
			it.Close()
			return err
		}
		kbuf = key
		live, err := decodeHist(v, mod, &rec)
		if err != nil {
			it.Close()
			return err
		}
		if live && !fn(key, &rec) {
			break
		}
		group = append(group[:0], k[:len(k)-8]...)
		valid = it.Next()
		for n := 0; valid && inGroup(it.Key(), group); n++ {
			if n == latestSkipNexts {
				seek = append(seek[:0], group...)
				seek[len(seek)-1] = 0x02
				valid = it.SeekGE(seek)
				break
			}
			valid = it.Next()
		}
	}
	if err := it.Error(); err != nil {
		it.Close()
		return err
	}
	return it.Close()
}

// getLatestVersion visits key's newest version unless it is a
// tombstone: the first record of its history group. When revs knows
// the newest revision and r holds that record, it is one point lookup;
// otherwise a seek into the group.
func getLatestVersion(r pebble.Reader, revs *revCache, key, buf []byte, fn visitFn) error {
	if revs != nil {
		if rev, ok := revs.get(key); ok {
			hk := histKey(buf, key, rev)
			v, c, err := r.Get(hk)
			if err == nil {
				var rec record
				live, err := decodeHist(v, rev, &rec)
				if err == nil && live {
					fn(key, &rec)
				}
				c.Close()
				return err
			}
			if !errors.Is(err, pebble.ErrNotFound) {
				return err
			}
			buf = hk[:0] // not in r's view: seek
		}
	}
	// Both bounds in buf: the group (ending 0x00 0x01), then the group
	// ending 0x00 0x02, past its versions. Room for both escaped, at most.
	if need := 2 * (len(prefixHistory) + 2*len(key) + 2); cap(buf) < need {
		buf = make([]byte, 0, need)
	}
	b := histGroup(buf, key)
	n := len(b)
	b = append(b, b...)
	lower, upper := b[:n:n], b[n:]
	upper[len(upper)-1] = 0x02
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	if it.First() {
		k := it.Key()
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return err
		}
		if len(k) != n+8 {
			it.Close()
			return fmt.Errorf("mvcc: history key %q of key %q has %d bytes, want %d", k, key, len(k), n+8)
		}
		var rec record
		live, err := decodeHist(v, int64(^binary.BigEndian.Uint64(k[n:])), &rec)
		if err != nil {
			it.Close()
			return err
		}
		if live {
			fn(key, &rec)
		}
	}
	if err := it.Error(); err != nil {
		it.Close()
		return err
	}
	return it.Close()
}

// inGroup reports whether history key k is a version of the key whose
// group (histGroup) is group.
func inGroup(k, group []byte) bool {
	return len(k) == len(group)+8 && bytes.HasPrefix(k, group)
}

// scanHistory visits the keys in sp that were live at revision rev, as
// recorded in the s/mh history. Per key it seeks to the newest version
// at or below rev, then jumps past the key's remaining versions.
func scanHistory(r pebble.Reader, sp span, rev int64, fn visitFn) error {
	if isEmpty(sp) {
		return nil
	}
	opts := &pebble.IterOptions{LowerBound: histGroup(nil, sp.start)}
	switch {
	case sp.single:
		opts.UpperBound = keyrange.PrefixEnd(opts.LowerBound)
	default:
		opts.UpperBound = histBound(sp.end)
	}
	it, err := r.NewIter(opts)
	if err != nil {
		return err
	}
	defer it.Close()
	var rec record
	var group, seek, kbuf []byte
	for valid := it.First(); valid; {
		k := it.Key()
		group = append(group[:0], k[:len(k)-8]...)
		seek = binary.BigEndian.AppendUint64(append(seek[:0], group...), ^uint64(rev))
		if it.SeekGE(seek) {
			k = it.Key()
			if len(k) == len(group)+8 && bytes.HasPrefix(k, group) {
				v, err := it.ValueAndErr()
				if err != nil {
					return err
				}
				key, mod, err := decodeHistKey(kbuf, k)
				if err != nil {
					return err
				}
				kbuf = key
				live, err := decodeHist(v, mod, &rec)
				if err != nil {
					return err
				}
				if live {
					if !fn(key, &rec) {
						return it.Error()
					}
				}
			}
		}
		// group ends with the terminator 0x00 0x01; 0x00 0x02 sorts after
		// every version of this key and before any other key.
		seek = append(seek[:0], group...)
		seek[len(seek)-1] = 0x02
		valid = it.SeekGE(seek)
	}
	return it.Error()
}

// checkReadRevision checks a read revision against the store's current
// and compact revisions; 0 means current.
func checkReadRevision(rev, cur, comp int64) error {
	if rev > cur {
		return invalid("revision %d is in the future (current %d)", rev, cur)
	}
	if rev != 0 && rev < comp {
		return compactedErr(rev, comp)
	}
	return nil
}

// Range serves a read from r (a snapshot, the DB or a batch). The header
// revision is the revision stored in r, or the requested revision.
func (s *Store) Range(r pebble.Reader, req *dkvpb.RangeRequest) (*dkvpb.RangeResponse, error) {
	if err := ValidateRange(req, s.limits); err != nil {
		return nil, err
	}
	cur, comp, err := readCounters(r)
	if err != nil {
		return nil, err
	}
	return s.rangeAt(r, req, cur, comp, true)
}

// RangeLatest serves a read from the live database, with the header
// revision exactly that of the state read. It takes the revision from
// memory rather than from Pebble (the counters would cost two more
// lookups per read) and checks the commit sequence lock: if a batch was
// committed while it read, or one is being committed, it reads again,
// from a Pebble snapshot after a few tries.
func (s *Store) RangeLatest(db *pebble.DB, req *dkvpb.RangeRequest) (*dkvpb.RangeResponse, error) {
	if err := ValidateRange(req, s.limits); err != nil {
		return nil, err
	}
	for range 3 {
		g := s.gen.Load()
		if g%2 == 1 {
			break
		}
		cur, comp := s.committedRev.Load(), s.committedComp.Load()
		resp, err := s.rangeAt(db, req, cur, comp, true)
		if s.gen.Load() == g {
			return resp, err
		}
	}
	snap := db.NewSnapshot()
	defer snap.Close()
	return s.Range(snap, req)
}

// rangeAt reads req through r where the revision before any pending
// writes is cur. A revision-0 read uses the latest records (which, in a
// txn, include the txn's own writes); an explicit revision reads history,
// unless latestIsCur says the latest records are exactly revision cur.
func (s *Store) rangeAt(r pebble.Reader, req *dkvpb.RangeRequest, cur, comp int64, latestIsCur bool) (*dkvpb.RangeResponse, error) {
	if err := checkReadRevision(req.Revision, cur, comp); err != nil {
		return nil, err
	}
	rev := req.Revision
	latest := rev == 0 || (latestIsCur && rev == cur)
	if rev == 0 {
		rev = cur
	}
	sp := makeSpan(req.Key, req.RangeEnd, req.Prefix)

	order, target := req.SortOrder, req.SortTarget
	if order == dkvpb.RangeRequest_NONE && target != dkvpb.RangeRequest_KEY {
		order = dkvpb.RangeRequest_ASCEND
	}
	sorted := order == dkvpb.RangeRequest_DESCEND || target != dkvpb.RangeRequest_KEY
	keepValue := !req.KeysOnly || (sorted && target == dkvpb.RangeRequest_VALUE)

	resp := &dkvpb.RangeResponse{Header: &dkvpb.ResponseHeader{Revision: rev}}
	var count int64
	var sl slab
	visit := func(key []byte, rec *record) bool {
		count++
		if req.CountOnly || (!sorted && req.Limit > 0 && int64(len(resp.Kvs)) >= req.Limit) {
			return true
		}
		kv := sl.kv()
		kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease = rec.create, rec.mod, rec.version, rec.lease
		kv.Labels = decodeLabels(rec.labels)
		if keepValue {
			kv.Key, kv.Value = sl.bytes2(key, rec.value)
		} else {
			kv.Key = sl.bytes(key)
		}
		resp.Kvs = append(resp.Kvs, kv)
		return true
	}
	var err error
	if latest {
		err = s.scanLatest(r, sp, visit)
	} else {
		err = scanHistory(r, sp, rev, visit)
	}
	if err != nil {
		return nil, err
	}
	resp.Count = count
	if sorted {
		sortKVs(resp.Kvs, order, target)
		if req.KeysOnly {
			for _, kv := range resp.Kvs {
				kv.Value = nil
			}
		}
	}
	if req.Limit > 0 && int64(len(resp.Kvs)) > req.Limit {
		resp.Kvs = resp.Kvs[:req.Limit]
	}
	resp.More = !req.CountOnly && req.Limit > 0 && count > req.Limit
	return resp, nil
}

// sortKVs sorts kvs (which arrive in key order) stably, so that equal
// targets stay in ascending key order.
func sortKVs(kvs []*dkvpb.KeyValue, order dkvpb.RangeRequest_SortOrder, target dkvpb.RangeRequest_SortTarget) {
	cmp := func(a, b *dkvpb.KeyValue) int {
		switch target {
		case dkvpb.RangeRequest_VERSION:
			return cmpInt(a.Version, b.Version)
		case dkvpb.RangeRequest_CREATE:
			return cmpInt(a.CreateRevision, b.CreateRevision)
		case dkvpb.RangeRequest_MOD:
			return cmpInt(a.ModRevision, b.ModRevision)
		case dkvpb.RangeRequest_VALUE:
			return bytes.Compare(a.Value, b.Value)
		}
		return bytes.Compare(a.Key, b.Key)
	}
	if order == dkvpb.RangeRequest_DESCEND {
		sort.SliceStable(kvs, func(i, j int) bool { return cmp(kvs[i], kvs[j]) > 0 })
	} else {
		sort.SliceStable(kvs, func(i, j int) bool { return cmp(kvs[i], kvs[j]) < 0 })
	}
}

// HashKV hashes (FNV-64a) the visible state at rev (0 = current): each
// live key's key, value, create and mod revision, version and lease, in
// key order. Replicas with equal state have equal hashes.
func (s *Store) HashKV(r pebble.Reader, rev int64) (hash uint64, atRev int64, compactRev int64, err error) {
	cur, comp, err := readCounters(r)
	if err != nil {
		return 0, 0, 0, err
	}
	if rev < 0 {
		return 0, 0, 0, invalid("revision is %d; it must not be negative", rev)
	}
	if err := checkReadRevision(rev, cur, comp); err != nil {
		return 0, 0, 0, err
	}
	if rev == 0 {
		rev = cur
	}
	h := fnv.New64a()
	var buf []byte
	visit := func(key []byte, rec *record) bool {
		buf = binary.AppendUvarint(buf[:0], uint64(len(key)))
		buf = append(buf, key...)
		buf = binary.AppendUvarint(buf, uint64(len(rec.value)))
		buf = append(buf, rec.value...)
		buf = binary.AppendVarint(buf, rec.create)
		buf = binary.AppendVarint(buf, rec.mod)
		buf = binary.AppendVarint(buf, rec.version)
		buf = binary.AppendVarint(buf, rec.lease)
		if len(rec.labels) > 0 {
			// Only labelled keys add bytes: hashes of unlabelled state
			// are as before labels existed.
			buf = append(buf, rec.labels...)
		}
		h.Write(buf)
		return true
	}
	all := span{}
	if rev == cur {
		err = scanLatest(r, all, visit)
	} else {
		err = scanHistory(r, all, rev, visit)
	}
	if err != nil {
		return 0, 0, 0, err
	}
	return h.Sum64(), rev, comp, nil
}

// slab hands out the KeyValues of one reply and the copies of their keys
// and values from a few shared allocations instead of three per key. A
// chunk is never reallocated, so what it handed out stays valid; the
// chunks grow geometrically, so a one-key read allocates little and a
// large one few times.
type slab struct {
	kvs []dkvpb.KeyValue
	buf []byte
	n   int // KeyValues handed out so far
}

const slabMaxKVs, slabMaxBytes = 256, 64 << 10

func (s *slab) kv() *dkvpb.KeyValue {
	if len(s.kvs) == 0 {
		s.kvs = make([]dkvpb.KeyValue, min(max(s.n, 1), slabMaxKVs))
	}
	kv := &s.kvs[0]
	s.kvs = s.kvs[1:]
	s.n++
	return kv
}

// alloc returns n bytes of zero length and capacity n.
func (s *slab) alloc(n int) []byte {
	if n > cap(s.buf)-len(s.buf) {
		if n > slabMaxBytes/4 {
			return make([]byte, 0, n)
		}
		size := n // the first chunk fits exactly: most reads are of one key
		if cap(s.buf) > 0 {
			size = min(max(2*cap(s.buf), 2*n, 256), slabMaxBytes)
		}
		s.buf = make([]byte, 0, size)
	}
	b := s.buf[len(s.buf) : len(s.buf) : len(s.buf)+n]
	s.buf = s.buf[:len(s.buf)+n]
	return b
}

// bytes copies b (nil if empty, like append([]byte(nil), b...)).
func (s *slab) bytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append(s.alloc(len(b)), b...)
}

// bytes2 copies a and b into one allocation.
func (s *slab) bytes2(a, b []byte) ([]byte, []byte) {
	if len(a) == 0 || len(b) == 0 {
		return s.bytes(a), s.bytes(b)
	}
	c := append(append(s.alloc(len(a)+len(b)), a...), b...)
	return c[:len(a):len(a)], c[len(a):]
}
