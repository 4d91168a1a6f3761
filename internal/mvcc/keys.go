package mvcc

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/dkv-io/dkv/internal/keyrange"
	"github.com/dkv-io/dkv/internal/keys"
)

// Key layout (declared in package keys). Every key this package writes
// starts with "s/m".
var (
	prefixLatest  = keys.MVCCLatestPrefix  // s/mk/<key> → latest record of a live key
	prefixHistory = keys.MVCCHistoryPrefix // s/mh/<esc(key)>\x00\x01<^rev> → history record
	prefixChanges = keys.MVCCChangesPrefix // s/mr/<rev> → keys changed at rev
	keyRevision   = keys.MVCCRevision
	keyCompact    = keys.MVCCCompact
)

// histTerm ends an escaped key in a history key. Escaping turns 0x00 into
// 0x00 0xFF, so 0x00 0x01 cannot occur inside an escaped key and sorts
// before any continuation of it: the encoding keeps user-key order.
var histTerm = [2]byte{0x00, 0x01}

func latestKey(dst, key []byte) []byte {
	dst = append(dst[:0], prefixLatest...)
	return append(dst, key...)
}

func appendEscaped(dst, key []byte) []byte {
	for _, c := range key {
		if c == 0 {
			dst = append(dst, 0, 0xff)
		} else {
			dst = append(dst, c)
		}
	}
	return dst
}

// histGroup returns s/mh/<esc(key)>\x00\x01: the common prefix of every
// history record of key.
func histGroup(dst, key []byte) []byte {
	dst = append(dst[:0], prefixHistory...)
	dst = appendEscaped(dst, key)
	return append(dst, histTerm[0], histTerm[1])
}

// histKey is the history key of key at rev. The revision is stored
// inverted so that the newest version sorts first and SeekGE(histKey(k, R))
// lands on the newest version at or below R.
func histKey(dst, key []byte, rev int64) []byte {
	dst = histGroup(dst, key)
	return binary.BigEndian.AppendUint64(dst, ^uint64(rev))
}

// histBound maps a user-key bound to the history keyspace: every history
// key of a user key k < end sorts before histBound(end).
func histBound(end []byte) []byte {
	if end == nil {
		return keyrange.PrefixEnd(prefixHistory)
	}
	return histGroup(nil, end)
}

// decodeHistKey splits a history key into its user key, appended to
// dst[:0], and revision.
func decodeHistKey(dst, k []byte) (key []byte, rev int64, err error) {
	if len(k) < len(prefixHistory)+2+8 {
		return nil, 0, fmt.Errorf("mvcc: short history key %q", k)
	}
	rev = int64(^binary.BigEndian.Uint64(k[len(k)-8:]))
	esc := k[len(prefixHistory) : len(k)-10]
	if bytes.IndexByte(esc, 0) < 0 {
		return append(dst[:0], esc...), rev, nil // nothing escaped
	}
	key = dst[:0]
	for i := 0; i < len(esc); i++ {
		c := esc[i]
		if c == 0 {
			if i+1 >= len(esc) || esc[i+1] != 0xff {
				return nil, 0, fmt.Errorf("mvcc: bad escape in history key %q", k)
			}
			i++
		}
		key = append(key, c)
	}
	return key, rev, nil
}

func changeKey(rev int64) []byte {
	return appendChangeKey(make([]byte, 0, len(prefixChanges)+8), rev)
}

func appendChangeKey(dst []byte, rev int64) []byte {
	dst = append(dst, prefixChanges...)
	return binary.BigEndian.AppendUint64(dst, uint64(rev))
}

// record is one version of a key. In s/mk the mod revision is stored; in
// s/mh it is the key's revision and the record starts with a kind byte.
type record struct {
	create, mod, version, lease int64
	value                       []byte
	// labels are the version's labels, encoded (encodeLabels); nil for
	// none. A record without labels is encoded exactly as before labels
	// existed.
	labels []byte
}

const (
	kindPut       byte = 1
	kindTombstone byte = 2
	// kindPutLabels is a put whose record carries labels: uvarint
	// len(labels), labels, then as kindPut.
	kindPutLabels byte = 3
)

// latestLabelsMark starts an s/mk value that carries labels: 0x00,
// uvarint len(labels), labels, then the plain record. A plain record
// starts with its create revision, a uvarint >= 1, never 0x00.
const latestLabelsMark byte = 0

func appendLatest(dst []byte, r *record) []byte {
	if len(r.labels) > 0 {
		dst = append(dst, latestLabelsMark)
		dst = binary.AppendUvarint(dst, uint64(len(r.labels)))
		dst = append(dst, r.labels...)
	}
	dst = binary.AppendUvarint(dst, uint64(r.create))
	dst = binary.AppendUvarint(dst, uint64(r.mod))
	dst = binary.AppendUvarint(dst, uint64(r.version))
	dst = binary.AppendVarint(dst, r.lease)
	return append(dst, r.value...)
}

// decodeLatest decodes an s/mk value; r.value aliases b.
func decodeLatest(b []byte, r *record) error {
	var ok bool
	var u uint64
	r.labels = nil
	if len(b) > 0 && b[0] == latestLabelsMark {
		if u, b, ok = uvarint(b[1:]); !ok || uint64(len(b)) < u {
			return errCorrupt
		}
		r.labels, b = b[:u:u], b[u:]
	}
	if u, b, ok = uvarint(b); !ok {
		return errCorrupt
	}
	r.create = int64(u)
	if u, b, ok = uvarint(b); !ok {
		return errCorrupt
	}
	r.mod = int64(u)
	if u, b, ok = uvarint(b); !ok {
		return errCorrupt
	}
	r.version = int64(u)
	l, n := binary.Varint(b)
	if n <= 0 {
		return errCorrupt
	}
	r.lease = l
	r.value = b[n:]
	return nil
}

func appendHistPut(dst []byte, r *record) []byte {
	if len(r.labels) > 0 {
		dst = append(dst, kindPutLabels)
		dst = binary.AppendUvarint(dst, uint64(len(r.labels)))
		dst = append(dst, r.labels...)
	} else {
		dst = append(dst, kindPut)
	}
	dst = binary.AppendUvarint(dst, uint64(r.create))
	dst = binary.AppendUvarint(dst, uint64(r.version))
	dst = binary.AppendVarint(dst, r.lease)
	return append(dst, r.value...)
}

// decodeHist decodes an s/mh value; it reports false for a tombstone.
// r.value aliases b.
func decodeHist(b []byte, rev int64, r *record) (live bool, err error) {
	if len(b) == 0 {
		return false, errCorrupt
	}
	var ok bool
	var u uint64
	r.labels = nil
	switch b[0] {
	case kindTombstone:
		return false, nil
	case kindPut:
		b = b[1:]
	case kindPutLabels:
		if u, b, ok = uvarint(b[1:]); !ok || uint64(len(b)) < u {
			return false, errCorrupt
		}
		r.labels, b = b[:u:u], b[u:]
	default:
		return false, errCorrupt
	}
	if u, b, ok = uvarint(b); !ok {
		return false, errCorrupt
	}
	r.create = int64(u)
	if u, b, ok = uvarint(b); !ok {
		return false, errCorrupt
	}
	r.version = int64(u)
	l, n := binary.Varint(b)
	if n <= 0 {
		return false, errCorrupt
	}
	r.lease = l
	r.value = b[n:]
	r.mod = rev
	return true, nil
}

func uvarint(b []byte) (uint64, []byte, bool) {
	u, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, b, false
	}
	return u, b[n:], true
}

// change is one entry of the per-revision change log.
type change struct {
	kind byte // kindPut or kindTombstone
	key  []byte
}

func appendChanges(dst []byte, cs []change) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(cs)))
	for _, c := range cs {
		dst = append(dst, c.kind)
		dst = binary.AppendUvarint(dst, uint64(len(c.key)))
		dst = append(dst, c.key...)
	}
	return dst
}

// DecodeChanges decodes a change-log value (the value of s/mr/<rev>): the
// kinds and keys written at that revision, in the order they were written.
// put reports whether the change was a put (true) or a delete.
func DecodeChanges(b []byte, fn func(put bool, key []byte)) error {
	n, b, ok := uvarint(b)
	if !ok {
		return errCorrupt
	}
	for i := uint64(0); i < n; i++ {
		if len(b) == 0 {
			return errCorrupt
		}
		kind := b[0]
		var l uint64
		if l, b, ok = uvarint(b[1:]); !ok || uint64(len(b)) < l {
			return errCorrupt
		}
		fn(kind == kindPut, b[:l])
		b = b[l:]
	}
	return nil
}

var errCorrupt = fmt.Errorf("mvcc: corrupt record")
