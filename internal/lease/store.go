package lease

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/keyrange"
	"github.com/dkv-io/dkv/internal/keys"
)

// TTL bounds, in milliseconds.
const (
	MinTTLMs = int64(time.Second / time.Millisecond)
	MaxTTLMs = int64(365 * 24 * time.Hour / time.Millisecond)
)

// ValidateTTL checks a TTL in milliseconds against the bounds.
func ValidateTTL(what string, ms int64) error {
	if ms < MinTTLMs || ms > MaxTTLMs {
		return dkverr.New(dkverr.InvalidInput, "%s is %dms; it must be between %dms (1s) and %dms (1 year)", what, ms, MinTTLMs, MaxTTLMs)
	}
	return nil
}

// NotFound is the LeaseNotFound error for id.
func NotFound(id int64) error {
	return dkverr.New(dkverr.LeaseNotFound, "lease %d not found (never granted, revoked or expired)", id)
}

var (
	prefixRecord = keys.LeaseRecordPrefix
	prefixKeys   = keys.LeaseKeysPrefix
	keySeq       = keys.LeaseSeq
)

// Record is one lease's persistent state.
type Record struct {
	ID int64
	// TTLMs is the granted TTL.
	TTLMs int64
	// RemainingMs is the remaining TTL as of the command that last wrote
	// the record.
	RemainingMs int64
	// Epoch grows with each grant and renewal.
	Epoch uint64
	// Auto marks a lease granted by a put with ttl_ms: it is deleted as
	// soon as it has no keys left.
	Auto bool
	// Owner is the user who granted the lease; empty when auth was
	// disabled at the time. With auth enabled only the owner or root may
	// renew, revoke or attach to it (see MayUse).
	Owner string
}

// MayUse reports whether user may renew, revoke, read or attach to a lease
// owned by owner, given whether user has the root role. An empty user is
// a command made with auth disabled or by a member itself: unrestricted.
// A lease without owner was granted while auth was disabled and is
// root's alone once it is enabled.
func MayUse(user string, root bool, owner string) bool {
	return user == "" || root || owner != "" && owner == user
}

// Denied is the PermissionDenied error for user's attempt to do what to
// lease id, which it does not own.
func Denied(user string, id int64, owner, what string) error {
	if owner == "" {
		return dkverr.New(dkverr.PermissionDenied, "user %q may not %s lease %d: it was granted before auth was enabled, so only root may", user, what, id)
	}
	return dkverr.New(dkverr.PermissionDenied, "user %q may not %s lease %d: a lease belongs to the user who granted it, and only that user or root may", user, what, id)
}

func recordKey(id int64) []byte {
	k := make([]byte, 0, len(prefixRecord)+8)
	k = append(k, prefixRecord...)
	return binary.BigEndian.AppendUint64(k, uint64(id))
}

func keysPrefix(id int64) []byte {
	k := make([]byte, 0, len(prefixKeys)+8)
	k = append(k, prefixKeys...)
	return binary.BigEndian.AppendUint64(k, uint64(id))
}

func attachKey(id int64, key []byte) []byte {
	return append(keysPrefix(id), key...)
}

func encode(r *Record) []byte {
	b := make([]byte, 0, 24)
	b = binary.AppendUvarint(b, uint64(r.TTLMs))
	b = binary.AppendUvarint(b, uint64(r.RemainingMs))
	b = binary.AppendUvarint(b, r.Epoch)
	var flags byte
	if r.Auto {
		flags |= flagAuto
	}
	if r.Owner == "" {
		// As before owners existed: a cluster with auth disabled writes
		// the same bytes as older versions.
		return append(b, flags)
	}
	return append(append(b, flags|flagOwner), r.Owner...)
}

// Record flags; the owner's name, when flagOwner is set, is the rest of
// the value.
const (
	flagAuto  = 1
	flagOwner = 2
)

var errCorrupt = errors.New("lease: corrupt record")

func decode(id int64, b []byte) (Record, error) {
	r := Record{ID: id}
	var vals [3]uint64
	for i := range vals {
		u, n := binary.Uvarint(b)
		if n <= 0 {
			return r, errCorrupt
		}
		vals[i], b = u, b[n:]
	}
	if len(b) < 1 {
		return r, errCorrupt
	}
	flags, rest := b[0], b[1:]
	if flags&^(flagAuto|flagOwner) != 0 || (flags&flagOwner != 0) != (len(rest) > 0) {
		return r, errCorrupt
	}
	r.TTLMs, r.RemainingMs, r.Epoch, r.Auto = int64(vals[0]), int64(vals[1]), vals[2], flags&flagAuto != 0
	r.Owner = string(rest)
	return r, nil
}

// Get reads lease id's record.
func Get(r pebble.Reader, id int64) (Record, bool, error) {
	v, c, err := r.Get(recordKey(id))
	if errors.Is(err, pebble.ErrNotFound) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, err
	}
	defer c.Close()
	rec, err := decode(id, v)
	return rec, err == nil, err
}

// Set writes a record.
func Set(b *pebble.Batch, r *Record) error { return b.Set(recordKey(r.ID), encode(r), nil) }

// Delete removes a record (not its attached-key index; the caller deletes
// the keys, which detaches them).
func Delete(b *pebble.Batch, id int64) error { return b.Delete(recordKey(id), nil) }

// Attach records that key is attached to lease id.
func Attach(b *pebble.Batch, id int64, key []byte) error {
	return b.Set(attachKey(id, key), nil, nil)
}

// Detach removes the record that key is attached to lease id.
func Detach(b *pebble.Batch, id int64, key []byte) error {
	return b.Delete(attachKey(id, key), nil)
}

// Keys calls fn with each key attached to lease id, in key order; the key
// is only valid during the call. fn returning false stops.
func Keys(r pebble.Reader, id int64, fn func(key []byte) bool) error {
	p := keysPrefix(id)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: keyrange.PrefixEnd(p)})
	if err != nil {
		return err
	}
	for valid := it.First(); valid; valid = it.Next() {
		if !fn(it.Key()[len(p):]) {
			break
		}
	}
	if err := it.Error(); err != nil {
		it.Close()
		return err
	}
	return it.Close()
}

// HasKeys reports whether any key is attached to lease id.
func HasKeys(r pebble.Reader, id int64) (bool, error) {
	found := false
	err := Keys(r, id, func([]byte) bool { found = true; return false })
	return found, err
}

// List calls fn with every lease record in id order.
func List(r pebble.Reader, fn func(Record) bool) error {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefixRecord, UpperBound: keyrange.PrefixEnd(prefixRecord)})
	if err != nil {
		return err
	}
	for valid := it.First(); valid; valid = it.Next() {
		k := it.Key()
		if len(k) != len(prefixRecord)+8 {
			it.Close()
			return errCorrupt
		}
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return err
		}
		rec, err := decode(int64(binary.BigEndian.Uint64(k[len(prefixRecord):])), v)
		if err != nil {
			it.Close()
			return err
		}
		if !fn(rec) {
			break
		}
	}
	if err := it.Error(); err != nil {
		it.Close()
		return err
	}
	return it.Close()
}

// AllocID picks the id for a lease the server names: one more than the
// last id it picked, skipping ids in use (a client may have chosen them),
// so a server-picked id is never reused. Deterministic: it reads only b.
func AllocID(b *pebble.Batch) (int64, error) {
	var seq int64
	v, c, err := b.Get(keySeq)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return 0, err
	default:
		if len(v) != 8 {
			c.Close()
			return 0, fmt.Errorf("lease: %s is %d bytes, want 8", keySeq, len(v))
		}
		seq = int64(binary.BigEndian.Uint64(v))
		c.Close()
	}
	for {
		seq++
		if seq <= 0 { // wrapped: cannot happen in practice
			return 0, errors.New("lease: id space exhausted")
		}
		_, exists, err := Get(b, seq)
		if err != nil {
			return 0, err
		}
		if !exists {
			break
		}
	}
	if err := b.Set(keySeq, binary.BigEndian.AppendUint64(nil, uint64(seq)), nil); err != nil {
		return 0, err
	}
	return seq, nil
}
