package recipe

import (
	"context"
	"errors"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/dkv-io/dkv/client"
)

// Isolation is an STM's isolation level, as etcd's concurrency.STM has
// them. From strongest to weakest:
type Isolation int

const (
	// SerializableSnapshot (the default): every read of an attempt is at
	// the revision of its first read, and the commit is refused if any
	// key read or written changed after that revision. Transactions are
	// serializable and see a snapshot; a blind write (a key written but
	// not read) conflicts too, so no write skew on written keys.
	SerializableSnapshot Isolation = iota
	// Serializable: reads at the revision of the first read (one
	// consistent snapshot per attempt); the commit is refused if a key
	// read changed. Blind writes do not conflict.
	Serializable
	// RepeatableReads: each key is read once per attempt, at the latest
	// revision when first read (two keys may come from different
	// revisions: read skew within an attempt is possible); the commit is
	// refused if a key read changed, so no lost update.
	RepeatableReads
	// ReadCommitted: reads see committed data, the commit checks nothing:
	// concurrent read-modify-writes can lose updates.
	ReadCommitted
)

func (i Isolation) String() string {
	return [...]string{"serializable-snapshot", "serializable", "repeatable-reads", "read-committed"}[i]
}

// STMTx is what an STM function reads and writes through. Reads see the
// attempt's own writes. A failed read (the cluster unreachable, ...)
// makes Get return nil and the STM return that error, whatever the
// function returned.
type STMTx interface {
	// Get returns key's value, nil if it does not exist.
	Get(key string) []byte
	// Rev returns key's ModRevision as read (0 if it does not exist).
	Rev(key string) int64
	// Put writes key at commit.
	Put(key string, value []byte)
	// Del deletes key at commit.
	Del(key string)
}

// STMOption configures STM.
type STMOption func(*stmConfig)

type stmConfig struct {
	iso         Isolation
	maxAttempts int
}

// WithIsolation sets the isolation level (default SerializableSnapshot).
func WithIsolation(i Isolation) STMOption { return func(c *stmConfig) { c.iso = i } }

// WithSTMMaxAttempts bounds the attempts (default 0: retry until ctx ends).
// When they are used up, STM returns ErrConflict.
func WithSTMMaxAttempts(n int) STMOption { return func(c *stmConfig) { c.maxAttempts = n } }

// STMResult is the outcome of an STM.
type STMResult struct {
	// Revision is the revision of the committing transaction.
	Revision int64
	// Attempts is how many times apply ran (1 without a conflict).
	Attempts int
}

// STM runs apply as a software transaction over any number of keys: the
// reads are recorded, the writes buffered, and at the end one DKV
// transaction commits the writes if (by the isolation level) nothing it
// depended on changed; otherwise apply runs again on fresh data. apply
// must have no side effects besides the STMTx (it may run several
// times); an error it returns aborts the STM with that error and
// nothing written.
func STM(ctx context.Context, kv client.KV, apply func(STMTx) error, opts ...STMOption) (*STMResult, error) {
	cfg := stmConfig{iso: SerializableSnapshot}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.iso < SerializableSnapshot || cfg.iso > ReadCommitted || cfg.maxAttempts < 0 {
		return nil, &client.Error{Kind: client.ErrInvalidInput, Msg: "stm: unknown isolation level or negative max attempts"}
	}
	for attempt := 1; ; attempt++ {
		tx := &stmTx{ctx: ctx, kv: kv, iso: cfg.iso, reads: map[string]stmRead{}, writes: map[string]stmWrite{}}
		err := apply(tx)
		if tx.err != nil {
			err = tx.err
		}
		if err == nil {
			var tr *client.TxnResult
			tr, err = tx.commit()
			if err == nil && tr.Succeeded {
				return &STMResult{Revision: tr.Revision, Attempts: attempt}, nil
			}
			if err == nil {
				err = errSTMConflict
			}
		}
		if !errors.Is(err, errSTMConflict) && !errors.Is(err, client.ErrCompacted) {
			return nil, err
		}
		if cfg.maxAttempts > 0 && attempt >= cfg.maxAttempts {
			return nil, &client.Error{Kind: client.ErrConflict, Msg: "stm: still conflicting after the maximum attempts"}
		}
		// Back off a little, randomly, so that colliding transactions do
		// not keep colliding.
		d := time.Duration(rand.Int64N(int64(min(attempt, 10)) * int64(time.Millisecond)))
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

var errSTMConflict = errors.New("stm: conflict")

type stmRead struct {
	kv  *client.KeyValue // nil: absent
	rev int64            // ModRevision, 0 when absent
}

type stmWrite struct {
	value []byte
	del   bool
}

type stmTx struct {
	ctx    context.Context
	kv     client.KV
	iso    Isolation
	rev    int64 // the snapshot revision, from the first read (serializable levels)
	reads  map[string]stmRead
	writes map[string]stmWrite
	err    error
}

func (t *stmTx) read(key string) stmRead {
	if r, ok := t.reads[key]; ok {
		return r
	}
	if t.err != nil {
		return stmRead{}
	}
	var opts []client.OpOption
	if t.rev > 0 && (t.iso == SerializableSnapshot || t.iso == Serializable) {
		opts = append(opts, client.WithRev(t.rev))
	}
	rr, err := t.kv.Range(t.ctx, key, opts...)
	if err != nil {
		t.err = err
		return stmRead{}
	}
	if t.rev == 0 {
		t.rev = rr.Revision
	}
	var r stmRead
	if len(rr.KVs) == 1 {
		r = stmRead{kv: rr.KVs[0], rev: rr.KVs[0].ModRevision}
	}
	t.reads[key] = r
	return r
}

func (t *stmTx) Get(key string) []byte {
	if w, ok := t.writes[key]; ok {
		if w.del {
			return nil
		}
		return w.value
	}
	if r := t.read(key); r.kv != nil {
		return r.kv.Value
	}
	return nil
}

func (t *stmTx) Rev(key string) int64 { return t.read(key).rev }

func (t *stmTx) Put(key string, value []byte) {
	t.writes[key] = stmWrite{value: append([]byte(nil), value...)}
}

func (t *stmTx) Del(key string) { t.writes[key] = stmWrite{del: true} }

// commit sends the writes, guarded by the compares the isolation level
// asks for.
func (t *stmTx) commit() (*client.TxnResult, error) {
	var cmps []client.Cmp
	if t.iso != ReadCommitted {
		// Every key read is as it was read: same ModRevision (a key read
		// as absent: still 0).
		for _, k := range sortedKeys(t.reads) {
			cmps = append(cmps, client.ModRevision(k).Equal(t.reads[k].rev))
		}
	}
	if t.iso == SerializableSnapshot && t.rev > 0 {
		// A key written but not read must also be as it was at the
		// snapshot: learn its ModRevision there (a delete since then
		// shows as 0 now, which a "< rev+1" compare would miss).
		for _, k := range sortedKeys(t.writes) {
			if _, read := t.reads[k]; read {
				continue
			}
			rr, err := t.kv.Range(t.ctx, k, client.WithRev(t.rev), client.WithKeysOnly())
			if err != nil {
				return nil, err
			}
			var rev int64
			if len(rr.KVs) == 1 {
				rev = rr.KVs[0].ModRevision
			}
			cmps = append(cmps, client.ModRevision(k).Equal(rev))
		}
	}
	ops := make([]client.Op, 0, len(t.writes))
	for _, k := range sortedKeys(t.writes) {
		if w := t.writes[k]; w.del {
			ops = append(ops, client.OpDelete(k))
		} else {
			ops = append(ops, client.OpPut(k, w.value))
		}
	}
	return t.kv.Txn(t.ctx).If(cmps...).Then(ops...).Commit()
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
