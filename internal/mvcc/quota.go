package mvcc

// Quota is asked, before a command writes anything, whether each put of
// the command may grow the keyspace: package state implements it with
// the named stores' key and byte quotas. A refusal refuses the whole
// command, which then writes nothing and takes no revision.
type Quota interface {
	// Limited reports whether key is subject to a quota at all; only then
	// is its current size looked up.
	Limited(key []byte) bool
	// Admit is asked for a put of key: whether the key exists now, its
	// current and its new size (key and value bytes). Deletes in the same
	// command are not credited.
	Admit(key []byte, exists bool, oldSize, newSize int) error
}

// SetQuota installs q (nil: none). Call it before applying.
func (s *Store) SetQuota(q Quota) { s.quota = q }

// admit asks the quota about a put of value to key (ignoreValue: the
// key keeps its current value).
func (w *Writer) admit(key, value []byte, ignoreValue bool) error {
	q := w.s.quota
	if q == nil || !q.Limited(key) {
		return nil
	}
	prev, exists := w.get(key)
	old, n := 0, len(key)+len(value)
	if exists {
		old = len(key) + len(prev.value)
		if ignoreValue {
			n = old
		}
	}
	return q.Admit(key, exists, old, n)
}
