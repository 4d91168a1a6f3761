package recipe

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/concurrency"
)

// RWMutex is a read-write lock with FIFO fairness: readers share it,
// a writer has it alone, and each waits its turn in one queue ordered by
// create revision (keys <name>/q/r-<id> and <name>/q/w-<id> on the
// session's lease). A reader holds once no writer is queued ahead of it;
// a writer holds once it is first. A reader that arrives after a waiting
// writer queues behind it, so a stream of readers cannot starve a
// writer. Waiters are woken by watches on the key they wait for (the
// last writer ahead of a reader, the key just ahead of a writer).
//
// The lock is kept by the queue, not by the store's lock table: a holder
// that must fence its writes guards them with Held() in a txn (its queue
// key still exists, at its create revision, the holder's token).
type RWMutex struct {
	s    *concurrency.Session
	c    SyncClient
	name string

	key string
	rev int64
}

// NewRWMutex returns the read-write lock name (a key prefix) held on s's
// lease. s's client must be a SyncClient (a *client.Client is).
func NewRWMutex(s *concurrency.Session, name string) (*RWMutex, error) {
	c, ok := s.Client().(SyncClient)
	if !ok || name == "" {
		return nil, &client.Error{Kind: client.ErrInvalidInput, Msg: "rwmutex: needs a name and a session whose client can watch"}
	}
	return &RWMutex{s: s, c: c, name: name}, nil
}

// RLock waits until the lock is held for reading.
func (m *RWMutex) RLock(ctx context.Context) error { return m.lock(ctx, "r-") }

// Lock waits until the lock is held for writing.
func (m *RWMutex) Lock(ctx context.Context) error { return m.lock(ctx, "w-") }

func (m *RWMutex) lock(ctx context.Context, kind string) error {
	var b [12]byte
	_, _ = rand.Read(b[:])
	key := m.name + "/q/" + kind + hex.EncodeToString(b[:])
	pr, err := m.c.Put(ctx, key, nil, client.WithLease(m.s.Lease()))
	if err != nil {
		return err
	}
	if err := m.wait(ctx, key, kind == "w-"); err != nil {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _ = m.c.Delete(cctx, key)
		cancel()
		return err
	}
	m.key, m.rev = key, pr.Revision
	return nil
}

func (m *RWMutex) wait(ctx context.Context, key string, writer bool) error {
	for {
		select {
		case <-m.s.Done():
			return ErrPermitLost
		default:
		}
		rr, err := m.c.List(ctx, m.name+"/q/", client.WithSort(client.SortByCreateRevision, client.SortAscend), client.WithKeysOnly())
		if err != nil {
			return err
		}
		idx := -1
		for i, kv := range rr.KVs {
			if kv.Key == key {
				idx = i
				break
			}
		}
		if idx < 0 {
			return ErrPermitLost
		}
		ahead := ""
		if writer {
			if idx > 0 {
				ahead = rr.KVs[idx-1].Key
			}
		} else {
			for i := idx - 1; i >= 0; i-- {
				if strings.HasPrefix(rr.KVs[i].Key, m.name+"/q/w-") {
					ahead = rr.KVs[i].Key
					break
				}
			}
		}
		if ahead == "" {
			return nil
		}
		if err := waitDelete(ctx, m.c, m.s.Done(), ahead, []client.WatchOption{client.WithStartRevision(rr.Revision + 1), client.WithFilterPuts()}); err != nil {
			return err
		}
	}
}

// Unlock releases the lock, read or write.
func (m *RWMutex) Unlock(ctx context.Context) error {
	if m.key == "" {
		return concurrency.ErrNotLocked
	}
	_, err := m.c.Delete(ctx, m.key)
	m.key, m.rev = "", 0
	return err
}

// Token is the holder's fencing token: its queue key's create revision.
func (m *RWMutex) Token() int64 { return m.rev }

// Held is a txn compare that holds while this holder still holds the
// lock (its queue key exists with its create revision).
func (m *RWMutex) Held() client.Cmp {
	return client.CreateRevision(m.key).Equal(m.rev)
}
