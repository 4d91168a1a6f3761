package client

import (
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
)

// OpOption configures one operation. Options that do not apply to an
// operation are rejected with ErrInvalidInput rather than ignored.
type OpOption func(*opConfig)

type opConfig struct {
	// range selection
	prefix   bool
	rangeEnd string
	hasRange bool
	// reads
	limit        int64
	rev          int64
	keysOnly     bool
	countOnly    bool
	serializable bool
	sortTarget   SortTarget
	sortOrder    SortOrder
	// writes
	prevKV        bool
	lease         int64
	ttl           time.Duration
	ifAbsent      bool
	ifVersion     int64
	ifModRevision int64
	ignoreValue   bool
	labels        map[string]string
	ignoreLabels  bool
	// counter
	min, max *int64
	// lock handle (reads and writes)
	lock *dkvpb.LockHandle
}

func buildConfig(opts []OpOption) opConfig {
	var c opConfig
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

// SortTarget is the field a range is sorted by.
type SortTarget int

// SortOrder is the direction a range is sorted in.
type SortOrder int

const (
	SortByKey SortTarget = iota
	SortByVersion
	SortByCreateRevision
	SortByModRevision
	SortByValue
)

const (
	// SortNone returns keys in key order (the store's natural order).
	SortNone SortOrder = iota
	SortAscend
	SortDescend
)

var sortTargetPB = map[SortTarget]dkvpb.RangeRequest_SortTarget{
	SortByKey:            dkvpb.RangeRequest_KEY,
	SortByVersion:        dkvpb.RangeRequest_VERSION,
	SortByCreateRevision: dkvpb.RangeRequest_CREATE,
	SortByModRevision:    dkvpb.RangeRequest_MOD,
	SortByValue:          dkvpb.RangeRequest_VALUE,
}

var sortOrderPB = map[SortOrder]dkvpb.RangeRequest_SortOrder{
	SortNone:    dkvpb.RangeRequest_NONE,
	SortAscend:  dkvpb.RangeRequest_ASCEND,
	SortDescend: dkvpb.RangeRequest_DESCEND,
}

// WithPrefix makes a Range or Delete cover every key starting with key.
func WithPrefix() OpOption { return func(c *opConfig) { c.prefix = true } }

// WithRange makes a Range or Delete cover the keys in [key, end).
func WithRange(end string) OpOption {
	return func(c *opConfig) { c.rangeEnd, c.hasRange = end, true }
}

// WithFromKey makes a Range or Delete cover every key >= key.
func WithFromKey() OpOption { return WithRange("\x00") }

// WithLimit caps the number of keys a Range returns; 0 means no limit.
func WithLimit(n int64) OpOption { return func(c *opConfig) { c.limit = n } }

// WithRev reads the keyspace as it was at revision rev.
func WithRev(rev int64) OpOption { return func(c *opConfig) { c.rev = rev } }

// WithKeysOnly returns keys and metadata without values.
func WithKeysOnly() OpOption { return func(c *opConfig) { c.keysOnly = true } }

// WithCountOnly returns only the number of keys in the range.
func WithCountOnly() OpOption { return func(c *opConfig) { c.countOnly = true } }

// WithSort sorts a Range's result.
func WithSort(target SortTarget, order SortOrder) OpOption {
	return func(c *opConfig) { c.sortTarget, c.sortOrder = target, order }
}

// WithSerializable serves a read from the contacted node without a quorum
// round: faster and available without a leader, but possibly stale.
func WithSerializable() OpOption { return func(c *opConfig) { c.serializable = true } }

// WithPrevKV returns the key's previous value from a Put or Delete.
func WithPrevKV() OpOption { return func(c *opConfig) { c.prevKV = true } }

// WithLease attaches the key (Put, Counter) to a lease: it is deleted
// when the lease ends.
func WithLease(id int64) OpOption { return func(c *opConfig) { c.lease = id } }

// WithTTL makes a Put grant a fresh lease with TTL d (1s to 1 year, in
// milliseconds) and attach the key to it, in one step: the key disappears
// after d. PutResult.Lease is the lease's id, should the caller want to
// keep it alive or revoke it. Exclusive with WithLease.
func WithTTL(d time.Duration) OpOption { return func(c *opConfig) { c.ttl = d } }

// IfAbsent applies a Put only if the key does not exist; otherwise it
// fails with ErrConflict.
func IfAbsent() OpOption { return func(c *opConfig) { c.ifAbsent = true } }

// IfVersion applies a Put or single-key Delete only if the key's version
// is n; otherwise it fails with ErrConflict.
func IfVersion(n int64) OpOption { return func(c *opConfig) { c.ifVersion = n } }

// IfModRevision applies a Put only if the key's last modification was at
// revision rev; otherwise it fails with ErrConflict.
func IfModRevision(rev int64) OpOption { return func(c *opConfig) { c.ifModRevision = rev } }

// WithIgnoreValue makes a Put keep the current value (to re-attach a
// lease).
func WithIgnoreValue() OpOption { return func(c *opConfig) { c.ignoreValue = true } }

// WithLock makes a Put, Delete, Counter or Get (Range) under lock handle
// h. On h's own key it proves ownership: while a key is locked, writes
// without the current handle fail with ErrLocked. On any other key it is
// a fence: the operation applies (or the read returns) only while h is
// still the current holder, else ErrLocked. See docs/locks.md.
func WithLock(h LockHandle) OpOption { return func(c *opConfig) { c.lock = h.pb() } }

// WithMin makes a Counter fail with ErrConflict rather than go below n.
func WithMin(n int64) OpOption { return func(c *opConfig) { c.min = &n } }

// WithMax makes a Counter fail with ErrConflict rather than go above n.
func WithMax(n int64) OpOption { return func(c *opConfig) { c.max = &n } }

func (c *opConfig) readOnlyErr(op string) error {
	if c.prevKV || c.lease != 0 || c.ttl != 0 || c.ifAbsent || c.ifVersion != 0 || c.ifModRevision != 0 || c.ignoreValue || c.min != nil || c.max != nil {
		return newError(ErrInvalidInput, "%s takes no write options", op)
	}
	return nil
}

func (c *opConfig) rangeRequest(key string) (*dkvpb.RangeRequest, error) {
	if err := c.readOnlyErr("range"); err != nil {
		return nil, err
	}
	if c.prefix && c.hasRange {
		return nil, newError(ErrInvalidInput, "WithPrefix and WithRange are exclusive")
	}
	r := &dkvpb.RangeRequest{
		Key:          []byte(key),
		Prefix:       c.prefix,
		Limit:        c.limit,
		Revision:     c.rev,
		Serializable: c.serializable,
		KeysOnly:     c.keysOnly,
		CountOnly:    c.countOnly,
		SortOrder:    sortOrderPB[c.sortOrder],
		SortTarget:   sortTargetPB[c.sortTarget],
		Lock:         c.lock,
	}
	if c.hasRange {
		r.RangeEnd = []byte(c.rangeEnd)
	}
	return r, nil
}

func (c *opConfig) putRequest(key string, value []byte) (*dkvpb.PutRequest, error) {
	if c.prefix || c.hasRange || c.limit != 0 || c.rev != 0 || c.keysOnly || c.countOnly || c.serializable || c.min != nil || c.max != nil {
		return nil, newError(ErrInvalidInput, "put takes no range, read or counter options")
	}
	if c.ttl != 0 && c.lease != 0 {
		return nil, newError(ErrInvalidInput, "WithTTL and WithLease are exclusive")
	}
	if c.ttl < 0 || (c.ttl > 0 && c.ttl < time.Millisecond) {
		return nil, newError(ErrInvalidInput, "WithTTL(%v): the TTL must be between 1s and 1 year", c.ttl)
	}
	return &dkvpb.PutRequest{
		TtlMs:         c.ttl.Milliseconds(),
		Key:           []byte(key),
		Value:         value,
		Lease:         c.lease,
		PrevKv:        c.prevKV,
		IfAbsent:      c.ifAbsent,
		IfVersion:     c.ifVersion,
		IfModRevision: c.ifModRevision,
		IgnoreValue:   c.ignoreValue,
		Lock:          c.lock,
		Labels:        c.labels,
		IgnoreLabels:  c.ignoreLabels,
	}, nil
}

func (c *opConfig) deleteRequest(key string) (*dkvpb.DeleteRangeRequest, error) {
	if c.limit != 0 || c.rev != 0 || c.keysOnly || c.countOnly || c.serializable || c.lease != 0 || c.ttl != 0 || c.ifAbsent || c.ifModRevision != 0 || c.ignoreValue || c.min != nil || c.max != nil {
		return nil, newError(ErrInvalidInput, "delete takes only WithPrefix, WithRange, WithPrevKV and IfVersion")
	}
	if c.prefix && c.hasRange {
		return nil, newError(ErrInvalidInput, "WithPrefix and WithRange are exclusive")
	}
	r := &dkvpb.DeleteRangeRequest{
		Key:       []byte(key),
		Prefix:    c.prefix,
		PrevKv:    c.prevKV,
		IfVersion: c.ifVersion,
		Lock:      c.lock,
	}
	if c.hasRange {
		r.RangeEnd = []byte(c.rangeEnd)
	}
	return r, nil
}

func (c *opConfig) counterRequest(key string, delta int64) (*dkvpb.CounterRequest, error) {
	if c.prefix || c.hasRange || c.limit != 0 || c.rev != 0 || c.keysOnly || c.countOnly || c.serializable || c.prevKV || c.ttl != 0 || c.ifAbsent || c.ifVersion != 0 || c.ifModRevision != 0 || c.ignoreValue {
		return nil, newError(ErrInvalidInput, "counter takes only WithMin, WithMax and WithLease")
	}
	return &dkvpb.CounterRequest{Key: []byte(key), Delta: delta, Min: c.min, Max: c.max, Lease: c.lease, Lock: c.lock}, nil
}
