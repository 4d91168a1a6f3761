package lock

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/dkv-io/dkv/internal/keyrange"
	"github.com/dkv-io/dkv/internal/keys"
)

var (
	prefixHolder = keys.LockHolderPrefix
	prefixToken  = keys.LockTokenPrefix
	prefixQueue  = keys.LockQueuePrefix
	prefixOwner  = keys.LockOwnerPrefix
	prefixLease  = keys.LockLeasePrefix
	prefixGrant  = keys.LockGrantPrefix
	keySeq       = keys.LockSeq
)

// Holder is the current grant of a key's lock.
type Holder struct {
	Key   []byte
	Owner string
	Lease int64
	Token int64
	// OwnLease: the lease was granted for this lock and is revoked with it.
	OwnLease bool
	// NoWaiters: key's queue is known to be empty (it was empty at the
	// grant and Enqueue clears the mark), so a release need not look for
	// a next waiter and the holder is the only entry of its lease on key.
	// Records written before the mark existed lack it: a release then
	// scans the queue, as it always did.
	NoWaiters bool
}

// Waiter is one entry of a key's queue.
type Waiter struct {
	Seq      uint64
	Owner    string
	Lease    int64
	OwnLease bool
}

var errCorrupt = errors.New("lock: corrupt record")

func keyed(prefix, key []byte, extra int) []byte {
	k := make([]byte, 0, len(prefix)+binary.MaxVarintLen64+len(key)+extra)
	k = append(k, prefix...)
	k = binary.AppendUvarint(k, uint64(len(key)))
	return append(k, key...)
}

func get(r pebble.Reader, k []byte) ([]byte, bool, error) {
	v, c, err := r.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer c.Close()
	return append([]byte(nil), v...), true, nil
}

// Entry flag bits.
const (
	flagOwnLease  = 1 << 0
	flagNoWaiters = 1 << 1 // holder entries only
)

func encodeEntry(a, b uint64, own bool, owner string) []byte {
	var f byte
	if own {
		f = flagOwnLease
	}
	return encodeFlags(a, b, f, owner)
}

func encodeFlags(a, b uint64, f byte, owner string) []byte {
	v := make([]byte, 0, 2*binary.MaxVarintLen64+1+len(owner))
	v = binary.AppendUvarint(v, a)
	v = binary.AppendUvarint(v, b)
	v = append(v, f)
	return append(v, owner...)
}

func decodeEntry(v []byte) (a, b uint64, own bool, owner string, err error) {
	a, b, f, owner, err := decodeFlags(v)
	return a, b, f&flagOwnLease != 0, owner, err
}

func decodeFlags(v []byte) (a, b uint64, f byte, owner string, err error) {
	var n int
	if a, n = binary.Uvarint(v); n <= 0 {
		return 0, 0, 0, "", errCorrupt
	}
	v = v[n:]
	if b, n = binary.Uvarint(v); n <= 0 {
		return 0, 0, 0, "", errCorrupt
	}
	v = v[n:]
	if len(v) < 1 {
		return 0, 0, 0, "", errCorrupt
	}
	return a, b, v[0], string(v[1:]), nil
}

// GetHolder reads key's holder.
func GetHolder(r pebble.Reader, key []byte) (Holder, bool, error) {
	v, ok, err := get(r, keyed(prefixHolder, key, 0))
	if !ok || err != nil {
		return Holder{}, false, err
	}
	tok, lease, f, owner, err := decodeFlags(v)
	if err != nil {
		return Holder{}, false, err
	}
	return Holder{Key: append([]byte(nil), key...), Owner: owner, Lease: int64(lease), Token: int64(tok),
		OwnLease: f&flagOwnLease != 0, NoWaiters: f&flagNoWaiters != 0}, true, nil
}

// HeldKeys calls fn with every key that has a holder, in key order. The
// key is only valid during the call.
func HeldKeys(r pebble.Reader, fn func(key []byte)) error {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefixHolder, UpperBound: keyrange.PrefixEnd(prefixHolder)})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()[len(prefixHolder):]
		n, m := binary.Uvarint(k)
		if m <= 0 || uint64(len(k)-m) != n {
			return errCorrupt
		}
		fn(k[m:])
	}
	return it.Error()
}

// SetHolder records h as key's holder and advances the key's last token.
// The caller picks a token above LastToken.
func SetHolder(b *pebble.Batch, h *Holder) error {
	if err := putHolder(b, h); err != nil {
		return err
	}
	if err := b.Set(keyed(prefixToken, h.Key, 0), binary.BigEndian.AppendUint64(nil, uint64(h.Token)), nil); err != nil {
		return err
	}
	return indexAdd(b, h.Lease, h.Key, 1)
}

func putHolder(b *pebble.Batch, h *Holder) error {
	var f byte
	if h.OwnLease {
		f |= flagOwnLease
	}
	if h.NoWaiters {
		f |= flagNoWaiters
	}
	return b.Set(keyed(prefixHolder, h.Key, 0), encodeFlags(uint64(h.Token), uint64(h.Lease), f, h.Owner), nil)
}

// DeleteHolder removes h (the key becomes free unless the caller grants
// it again).
func DeleteHolder(b *pebble.Batch, h *Holder) error {
	if err := b.Delete(keyed(prefixHolder, h.Key, 0), nil); err != nil {
		return err
	}
	if err := b.Delete(keyed(prefixGrant, h.Key, 0), nil); err != nil {
		return err
	}
	if h.NoWaiters {
		// The holder was its lease's only entry on the key: the count is
		// 1, so drop it without reading it.
		return b.Delete(indexKey(h.Lease, h.Key), nil)
	}
	return indexAdd(b, h.Lease, h.Key, -1)
}

// SetGrant records when key's current holder was granted the lock: the
// store revision and the raft entry's time (GetGrant reads them).
func SetGrant(b *pebble.Batch, key []byte, rev, unixNano int64) error {
	v := binary.AppendUvarint(nil, uint64(rev))
	v = binary.AppendUvarint(v, uint64(unixNano))
	return b.Set(keyed(prefixGrant, key, 0), v, nil)
}

// GetGrant reads what SetGrant recorded for key's current holder; ok is
// false when nothing was (a grant made before grants were recorded).
func GetGrant(r pebble.Reader, key []byte) (rev, unixNano int64, ok bool, err error) {
	v, ok, err := get(r, keyed(prefixGrant, key, 0))
	if !ok || err != nil {
		return 0, 0, false, err
	}
	a, n := binary.Uvarint(v)
	if n <= 0 {
		return 0, 0, false, errCorrupt
	}
	t, m := binary.Uvarint(v[n:])
	if m <= 0 || n+m != len(v) {
		return 0, 0, false, errCorrupt
	}
	return int64(a), int64(t), true, nil
}

// LastToken is the token of key's latest grant, 0 if it was never locked.
func LastToken(r pebble.Reader, key []byte) (int64, error) {
	v, ok, err := get(r, keyed(prefixToken, key, 0))
	if !ok || err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, errCorrupt
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

func queueKey(key []byte, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(keyed(prefixQueue, key, 8), seq)
}

func ownerKey(key []byte, owner string) []byte {
	return append(keyed(prefixOwner, key, len(owner)), owner...)
}

// Enqueue appends a waiter to the queue of h's key (h is its current
// holder, whose NoWaiters mark it clears) and returns it with its seq.
func Enqueue(b *pebble.Batch, h *Holder, owner string, lease int64, own bool) (Waiter, error) {
	key := h.Key
	if h.NoWaiters {
		h.NoWaiters = false
		if err := putHolder(b, h); err != nil {
			return Waiter{}, err
		}
	}
	v, _, err := get(b, keySeq)
	if err != nil {
		return Waiter{}, err
	}
	var seq uint64
	if len(v) == 8 {
		seq = binary.BigEndian.Uint64(v)
	}
	seq++
	if err := b.Set(keySeq, binary.BigEndian.AppendUint64(nil, seq), nil); err != nil {
		return Waiter{}, err
	}
	w := Waiter{Seq: seq, Owner: owner, Lease: lease, OwnLease: own}
	if err := b.Set(queueKey(key, seq), encodeEntry(uint64(lease), 0, own, owner), nil); err != nil {
		return w, err
	}
	if err := b.Set(ownerKey(key, owner), binary.BigEndian.AppendUint64(nil, seq), nil); err != nil {
		return w, err
	}
	return w, indexAdd(b, lease, key, 1)
}

// FindWaiter finds owner's entry in key's queue.
func FindWaiter(r pebble.Reader, key []byte, owner string) (Waiter, bool, error) {
	v, ok, err := get(r, ownerKey(key, owner))
	if !ok || err != nil {
		return Waiter{}, false, err
	}
	if len(v) != 8 {
		return Waiter{}, false, errCorrupt
	}
	seq := binary.BigEndian.Uint64(v)
	e, ok, err := get(r, queueKey(key, seq))
	if err != nil {
		return Waiter{}, false, err
	}
	if !ok {
		return Waiter{}, false, fmt.Errorf("lock: owner index names missing waiter %d", seq)
	}
	lease, _, own, o, err := decodeEntry(e)
	if err != nil {
		return Waiter{}, false, err
	}
	return Waiter{Seq: seq, Owner: o, Lease: int64(lease), OwnLease: own}, true, nil
}

// RemoveWaiter removes w from key's queue.
func RemoveWaiter(b *pebble.Batch, key []byte, w Waiter) error {
	if err := b.Delete(queueKey(key, w.Seq), nil); err != nil {
		return err
	}
	if err := b.Delete(ownerKey(key, w.Owner), nil); err != nil {
		return err
	}
	return indexAdd(b, w.Lease, key, -1)
}

// Waiters calls fn for key's waiters in FIFO order until it returns false.
func Waiters(r pebble.Reader, key []byte, fn func(Waiter) bool) error {
	p := keyed(prefixQueue, key, 0)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: keyrange.PrefixEnd(p)})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != len(p)+8 {
			return errCorrupt
		}
		lease, _, own, owner, err := decodeEntry(it.Value())
		if err != nil {
			return err
		}
		if !fn(Waiter{Seq: binary.BigEndian.Uint64(k[len(p):]), Owner: owner, Lease: int64(lease), OwnLease: own}) {
			break
		}
	}
	return it.Error()
}

// LeaseKeys lists the keys lease holds or waits on, in key order.
func LeaseKeys(r pebble.Reader, lease int64) ([][]byte, error) {
	p := binary.BigEndian.AppendUint64(append([]byte(nil), prefixLease...), uint64(lease))
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: keyrange.PrefixEnd(p)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var keys [][]byte
	for it.First(); it.Valid(); it.Next() {
		keys = append(keys, append([]byte(nil), it.Key()[len(p):]...))
	}
	return keys, it.Error()
}

func indexKey(lease int64, key []byte) []byte {
	k := make([]byte, 0, len(prefixLease)+8+len(key))
	k = append(k, prefixLease...)
	k = binary.BigEndian.AppendUint64(k, uint64(lease))
	return append(k, key...)
}

func indexAdd(b *pebble.Batch, lease int64, key []byte, d int64) error {
	k := indexKey(lease, key)
	v, _, err := get(b, k)
	if err != nil {
		return err
	}
	var n int64
	if len(v) > 0 {
		u, m := binary.Uvarint(v)
		if m <= 0 {
			return errCorrupt
		}
		n = int64(u)
	}
	n += d
	if n < 0 {
		return fmt.Errorf("lock: lease %d index count for %q went negative", lease, key)
	}
	if n == 0 {
		return b.Delete(k, nil)
	}
	return b.Set(k, binary.AppendUvarint(nil, uint64(n)), nil)
}
