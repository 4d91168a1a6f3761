package mvcc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/keyrange"
	"github.com/dkv-io/dkv/internal/keys"
)

// Label indexes. An index is (prefix, label name). Its
// entries are versioned like history records, one per change of a key's
// membership in a label value:
//
//	s/mi/<id><value>\x00\x01<esc(key)>\x00\x01<^rev> -> kindPut | kindTombstone
//
// kindPut: from rev on, key has label = value; kindTombstone: from rev on
// it no longer has. A query at R takes, per (value, key), the newest entry
// at or below R, like scanHistory. Label values hold no control
// characters (ValidateLabelValue), so <value>\x00 ends a value and values
// sort in their own order. Entries are written by the Writer in the same
// batch as the key's records (indexWrite) and pruned by PurgeHistory
// exactly as history records are.
var (
	prefixIndexDef   = keys.MVCCIndexDefPrefix
	prefixIndexEntry = keys.MVCCIndexEntryPrefix
	keyIndexSeq      = keys.MVCCIndexSeq
)

// MaxIndexes bounds the number of indexes: every write under an index's
// prefix pays for it.
const MaxIndexes = 64

// IndexDef is one declared index.
type IndexDef struct {
	ID      uint64
	Prefix  []byte
	Label   string
	Created int64 // the store revision when it was built
}

// Info is the wire form of d.
func (d IndexDef) Info() *dkvpb.IndexInfo {
	return &dkvpb.IndexInfo{Id: d.ID, Prefix: d.Prefix, Label: d.Label, CreatedRevision: d.Created}
}

func indexDefKey(id uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte(nil), prefixIndexDef...), id)
}

func appendIndexDef(dst []byte, d IndexDef) []byte {
	dst = binary.AppendUvarint(dst, uint64(d.Created))
	dst = binary.AppendUvarint(dst, uint64(len(d.Prefix)))
	dst = append(dst, d.Prefix...)
	return append(dst, d.Label...)
}

func decodeIndexDef(k, v []byte) (IndexDef, error) {
	if len(k) != len(prefixIndexDef)+8 {
		return IndexDef{}, errCorrupt
	}
	d := IndexDef{ID: binary.BigEndian.Uint64(k[len(prefixIndexDef):])}
	c, v, ok := uvarint(v)
	if !ok {
		return d, errCorrupt
	}
	d.Created = int64(c)
	l, v, ok := uvarint(v)
	if !ok || uint64(len(v)) < l {
		return d, errCorrupt
	}
	d.Prefix = append([]byte{}, v[:l]...)
	d.Label = string(v[l:])
	return d, nil
}

// readIndexes reads every index definition, by id.
func readIndexes(r pebble.Reader) ([]IndexDef, error) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefixIndexDef, UpperBound: keyrange.PrefixEnd(prefixIndexDef)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var ds []IndexDef
	for valid := it.First(); valid; valid = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, err
		}
		d, err := decodeIndexDef(it.Key(), v)
		if err != nil {
			return nil, err
		}
		ds = append(ds, d)
	}
	return ds, it.Error()
}

// Indexes lists the indexes declared in r, by id (creation order).
func (s *Store) Indexes(r pebble.Reader) ([]IndexDef, error) { return readIndexes(r) }

// indexGroup is s/mi/<id><value>\x00\x01<esc(key)>\x00\x01: the common
// prefix of one (value, key)'s entries.
func indexGroup(dst []byte, id uint64, value string, key []byte) []byte {
	dst = indexValueStart(dst, id, value)
	dst = appendEscaped(dst, key)
	return append(dst, histTerm[0], histTerm[1])
}

// indexValueStart is s/mi/<id><value>\x00\x01: where value's keys start.
func indexValueStart(dst []byte, id uint64, value string) []byte {
	dst = append(dst[:0], prefixIndexEntry...)
	dst = binary.BigEndian.AppendUint64(dst, id)
	dst = append(dst, value...)
	return append(dst, histTerm[0], histTerm[1])
}

func indexEntryKey(dst []byte, id uint64, value string, key []byte, rev int64) []byte {
	dst = indexGroup(dst, id, value, key)
	return binary.BigEndian.AppendUint64(dst, ^uint64(rev))
}

// indexWrite updates the entries of every index covering key, for a write
// at w.rev that changes key's labels from prev's (nil: it did not exist)
// to labels (encoded; nil for a delete). A value that stays the same
// writes nothing: membership did not change.
func (w *Writer) indexWrite(key []byte, prev *dkvpb.KeyValue, labels []byte) {
	for _, d := range w.s.indexes {
		if !bytes.HasPrefix(key, d.Prefix) {
			continue
		}
		ov, had := prev.GetLabels()[d.Label]
		nv, has := labelOf(labels, d.Label)
		if had && has && ov == nv {
			continue
		}
		if had {
			w.s.ckbuf = indexEntryKey(w.s.ckbuf[:0], d.ID, ov, key, w.rev)
			must(w.b.Set(w.s.ckbuf, tombstoneValue, nil))
		}
		if has {
			w.s.ckbuf = indexEntryKey(w.s.ckbuf[:0], d.ID, nv, key, w.rev)
			must(w.b.Set(w.s.ckbuf, putMarkValue, nil))
		}
	}
}

var putMarkValue = []byte{kindPut}

func findIndex(ds []IndexDef, prefix []byte, label string) (IndexDef, bool) {
	for _, d := range ds {
		if d.Label == label && bytes.Equal(d.Prefix, prefix) {
			return d, true
		}
	}
	return IndexDef{}, false
}

// ValidateIndex checks an index create or drop.
func ValidateIndex(prefix []byte, label string, l Limits) error {
	l.EnsureDefaults()
	if len(prefix) > l.MaxKeyBytes {
		return invalid("index prefix is %d bytes; the limit is %d", len(prefix), l.MaxKeyBytes)
	}
	return ValidateLabelName(label)
}

// IndexCreate declares an index and builds its entries for the live keys
// under its prefix, in this one command (so it is exact at the revision
// it reports). It changes no key, so it takes no revision: the index
// serves queries at the current revision and later.
func (w *Writer) IndexCreate(r *dkvpb.IndexCreateRequest) (*dkvpb.IndexCreateResponse, error) {
	if _, ok := findIndex(w.s.indexes, r.Prefix, r.Label); ok {
		return nil, conflict("index on label %q under %q already exists", r.Label, r.Prefix)
	}
	if len(w.s.indexes) >= MaxIndexes {
		return nil, invalid("%d indexes exist; the limit is %d", len(w.s.indexes), MaxIndexes)
	}
	seq, err := readInt(w.b, keyIndexSeq)
	must(err)
	d := IndexDef{ID: uint64(seq) + 1, Prefix: append([]byte{}, r.Prefix...), Label: r.Label, Created: w.cur}
	w.s.vbuf = binary.BigEndian.AppendUint64(w.s.vbuf[:0], d.ID)
	must(w.b.Set(keyIndexSeq, w.s.vbuf, nil))
	must(w.b.Set(indexDefKey(d.ID), appendIndexDef(nil, d), nil))
	var built int64
	var kb []byte
	// Collect, then write: an iterator over the batch must not see its
	// own writes.
	type ent struct {
		key   []byte
		value string
	}
	var ents []ent
	must(scanLatest(w.b, makeSpan(r.Prefix, nil, true), func(key []byte, rec *record) bool {
		if v, ok := labelOf(rec.labels, d.Label); ok {
			ents = append(ents, ent{append([]byte(nil), key...), v})
		}
		return true
	}))
	for _, e := range ents {
		kb = indexEntryKey(kb[:0], d.ID, e.value, e.key, w.cur)
		must(w.b.Set(kb, putMarkValue, nil))
		built++
	}
	w.s.indexes = append(append([]IndexDef(nil), w.s.indexes...), d)
	return &dkvpb.IndexCreateResponse{Header: &dkvpb.ResponseHeader{}, Index: d.Info(), Built: built}, nil
}

// IndexDrop removes an index and all its entries.
func (w *Writer) IndexDrop(r *dkvpb.IndexDropRequest) (*dkvpb.IndexDropResponse, error) {
	d, ok := findIndex(w.s.indexes, r.Prefix, r.Label)
	if !ok {
		return nil, dkverr.New(dkverr.NotFound, "no index on label %q under %q", r.Label, r.Prefix)
	}
	must(w.b.Delete(indexDefKey(d.ID), nil))
	lo := binary.BigEndian.AppendUint64(append([]byte(nil), prefixIndexEntry...), d.ID)
	hi := binary.BigEndian.AppendUint64(append([]byte(nil), prefixIndexEntry...), d.ID+1)
	must(w.b.DeleteRange(lo, hi, nil))
	var rest []IndexDef
	for _, o := range w.s.indexes {
		if o.ID != d.ID {
			rest = append(rest, o)
		}
	}
	w.s.indexes = rest
	return &dkvpb.IndexDropResponse{Header: &dkvpb.ResponseHeader{}}, nil
}

// errNoIndexHist is returned when an index entry key cannot be parsed.
var errBadIndexKey = errors.New("mvcc: corrupt index entry key")

// decodeIndexGroupKey returns the user key of an index group (without
// its prefix up to the value's terminator).
func decodeEscaped(dst, esc []byte) ([]byte, error) {
	key := dst[:0]
	for i := 0; i < len(esc); i++ {
		c := esc[i]
		if c == 0 {
			if i+1 >= len(esc) || esc[i+1] != 0xff {
				return nil, fmt.Errorf("%w %q", errBadIndexKey, esc)
			}
			i++
		}
		key = append(key, c)
	}
	return key, nil
}
