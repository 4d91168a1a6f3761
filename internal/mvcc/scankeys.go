package mvcc

import "github.com/cockroachdb/pebble/v2"

// ScanKeys calls fn with each live key in [start, end) of r's latest
// state, in key order, until fn returns false. It is for node-local
// reporting (the queue metrics), which needs keys only and must stop
// early: a Range with a limit still counts the whole span. fn must copy
// the key to keep it.
func (s *Store) ScanKeys(r pebble.Reader, start, end []byte, fn func(key []byte) bool) error {
	return scanLatest(r, span{start: start, end: end}, func(k []byte, _ *record) bool { return fn(k) })
}

// CountLive counts the live keys in [start, end) of r's latest state
// (end nil: to the end of the keyspace), in any layout: for tools that
// read a checkpoint or snapshot without opening a Store.
func CountLive(r pebble.Reader, start, end []byte) (int64, error) {
	var n int64
	err := scanLatest(r, span{start: start, end: end}, func([]byte, *record) bool { n++; return true })
	return n, err
}
