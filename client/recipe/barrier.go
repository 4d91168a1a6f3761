package recipe

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/concurrency"
)

// Barrier blocks processes until it is released: one process Holds it
// (the key <name> exists), the others Wait until that key is deleted.
type Barrier struct {
	c    SyncClient
	name string
}

// NewBarrier returns the barrier name (a key). c must be a SyncClient (a
// *client.Client is).
func NewBarrier(c SyncClient, name string) *Barrier { return &Barrier{c: c, name: name} }

// Hold raises the barrier; client.ErrConflict if it is already raised.
// With a lease (a session's), the barrier falls if its holder dies.
func (b *Barrier) Hold(ctx context.Context, lease int64) error {
	_, err := b.c.Put(ctx, b.name, nil, client.IfAbsent(), client.WithLease(lease))
	return err
}

// Release lowers the barrier, waking every waiter.
func (b *Barrier) Release(ctx context.Context) error {
	_, err := b.c.Delete(ctx, b.name)
	return err
}

// Wait returns once the barrier is down (at once if it is not raised).
func (b *Barrier) Wait(ctx context.Context) error {
	for {
		rr, err := b.c.Range(ctx, b.name, client.WithKeysOnly())
		if err != nil {
			return err
		}
		if len(rr.KVs) == 0 {
			return nil
		}
		if err := waitDelete(ctx, b.c, nil, b.name, []client.WatchOption{client.WithStartRevision(rr.Revision + 1), client.WithFilterPuts()}); err != nil {
			return err
		}
	}
}

// DoubleBarrier lets N processes start a computation together and finish
// it together: Enter returns once N have entered, Leave once all of
// those have left. Participants' keys <name>/waiters/<id> live on their
// session's lease, so a dead participant counts as gone when its lease
// expires. A name serves one round: use a fresh name (with a round
// number) for the next.
type DoubleBarrier struct {
	s    *concurrency.Session
	c    SyncClient
	name string
	n    int
	key  string
}

// NewDoubleBarrier returns the double barrier name for n participants.
func NewDoubleBarrier(s *concurrency.Session, name string, n int) (*DoubleBarrier, error) {
	c, ok := s.Client().(SyncClient)
	if !ok || name == "" || n < 1 {
		return nil, &client.Error{Kind: client.ErrInvalidInput, Msg: fmt.Sprintf("double barrier: needs a name, n >= 1 (got %d) and a session whose client can watch", n)}
	}
	return &DoubleBarrier{s: s, c: c, name: name, n: n}, nil
}

func (d *DoubleBarrier) waiters() string { return d.name + "/waiters/" }
func (d *DoubleBarrier) ready() string   { return d.name + "/ready" }

// Enter joins and waits until n participants have joined. The one that
// completes the count raises <name>/ready, which wakes the others.
func (d *DoubleBarrier) Enter(ctx context.Context) error {
	var b [12]byte
	_, _ = rand.Read(b[:])
	d.key = d.waiters() + hex.EncodeToString(b[:])
	if _, err := d.c.Put(ctx, d.key, nil, client.WithLease(d.s.Lease())); err != nil {
		return err
	}
	for {
		rr, err := d.c.List(ctx, d.waiters(), client.WithCountOnly())
		if err != nil {
			return err
		}
		if rr.Count >= int64(d.n) {
			if _, err := d.c.Put(ctx, d.ready(), nil); err != nil {
				return err
			}
			return nil
		}
		r, err := d.c.Range(ctx, d.ready(), client.WithKeysOnly())
		if err != nil {
			return err
		}
		if len(r.KVs) > 0 {
			return nil
		}
		// Woken by ready's creation (or, harmlessly, a participant's
		// arrival under the prefix: then recount).
		if err := waitEvent(ctx, d.c, d.name+"/", rr.Revision+1); err != nil {
			return err
		}
	}
}

// ID is this participant's id once it has entered ("" before, and after
// Leave). Another process can Leave as this participant with SetID (the
// CLI's 'dkv barrier enter' and 'leave' are two processes).
func (d *DoubleBarrier) ID() string {
	if d.key == "" {
		return ""
	}
	return d.key[len(d.waiters()):]
}

// SetID makes d the participant id (from ID), so that Leave removes it.
func (d *DoubleBarrier) SetID(id string) error {
	if len(id) != 24 || strings.Trim(id, "0123456789abcdef") != "" {
		return &client.Error{Kind: client.ErrInvalidInput, Msg: fmt.Sprintf("double barrier: participant id %.40q: it must be the 24 hex digits ID returned", id)}
	}
	d.key = d.waiters() + id
	return nil
}

// Leave removes this participant and waits until every participant has
// left.
func (d *DoubleBarrier) Leave(ctx context.Context) error {
	if d.key != "" {
		if _, err := d.c.Delete(ctx, d.key); err != nil {
			return err
		}
		d.key = ""
	}
	for {
		rr, err := d.c.List(ctx, d.waiters(), client.WithCountOnly())
		if err != nil {
			return err
		}
		if rr.Count == 0 {
			return nil
		}
		if err := waitDelete(ctx, d.c, nil, d.waiters(), []client.WatchOption{client.WithStartRevision(rr.Revision + 1), client.WithFilterPuts(), client.WithPrefix()}); err != nil {
			return err
		}
	}
}

// waitEvent returns at the first event under prefix from rev on.
func waitEvent(ctx context.Context, c client.Watcher, prefix string, rev int64) error {
	return waitDelete(ctx, c, nil, prefix, []client.WatchOption{client.WithStartRevision(rev), client.WithPrefix()})
}
