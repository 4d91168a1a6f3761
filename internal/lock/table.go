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

func encodeEntry(a, b uint64, own bool, owner string) []byte {
	v := binary.AppendUvarint(nil, a)
	v = binary.AppendUvarint(v, b)
	var f byte
	if own {
		f = 1
	}
	v = append(v, f)
	return append(v, owner...)
}

func decodeEntry(v []byte) (a, b uint64, own bool, owner string, err error) {
	var n int
	if a, n = binary.Uvarint(v); n <= 0 {
		return 0, 0, false, "", errCorrupt
	}
	v = v[n:]
	if b, n = binary.Uvarint(v); n <= 0 {
		return 0, 0, false, "", errCorrupt
	}
	v = v[n:]
	if len(v) < 1 {
		return 0, 0, false, "", errCorrupt
	}
	return a, b, v[0]&1 != 0, string(v[1:]), nil
}

// GetHolder reads key's holder.
func GetHolder(r pebble.Reader, key []byte) (Holder, bool, error) {
	v, ok, err := get(r, keyed(prefixHolder, key, 0))
	if !ok || err != nil {
		return Holder{}, false, err
	}
	tok, lease, own, owner, err := decodeEntry(v)
	if err != nil {
		return Holder{}, false, err
	}
	return Holder{Key: append([]byte(nil), key...), Owner: owner, Lease: int64(lease), Token: int64(tok), OwnLease: own}, true, nil
}

// SetHolder records h as key's holder and advances the key's last token.
// The caller picks a token above LastToken.
func SetHolder(b *pebble.Batch, h *Holder) error {
	if err := b.Set(keyed(prefixHolder, h.Key, 0), encodeEntry(uint64(h.Token), uint64(h.Lease), h.OwnLease, h.Owner), nil); err != nil {
		return err
	}
	if err := b.Set(keyed(prefixToken, h.Key, 0), binary.BigEndian.AppendUint64(nil, uint64(h.Token)), nil); err != nil {
		return err
	}
	return indexAdd(b, h.Lease, h.Key, 1)
}

// DeleteHolder removes h (the key becomes free unless the caller grants
// it again).
func DeleteHolder(b *pebble.Batch, h *Holder) error {
	if err := b.Delete(keyed(prefixHolder, h.Key, 0), nil); err != nil {
		return err
	}
	return indexAdd(b, h.Lease, h.Key, -1)
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

// Enqueue appends a waiter to key's queue and returns it with its seq.
func Enqueue(b *pebble.Batch, key []byte, owner string, lease int64, own bool) (Waiter, error) {
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

func indexAdd(b *pebble.Batch, lease int64, key []byte, d int64) error {
	k := binary.BigEndian.AppendUint64(append([]byte(nil), prefixLease...), uint64(lease))
	k = append(k, key...)
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
