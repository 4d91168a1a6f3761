// Package keyrange holds byte-key helpers shared by the packages that lay out
// DKV's keyspace in Pebble (mvcc, lease, lock) and by the watch hub.
package keyrange

// PrefixEnd returns the smallest key greater than every key with prefix
// p, or nil if there is none (p is empty or all 0xff): an exclusive upper
// bound for iterating a prefix.
func PrefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}
