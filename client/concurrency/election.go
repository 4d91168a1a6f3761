package concurrency

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dkv-io/dkv/client"
)

// ErrNoLeader is returned by Leader when the election has no leader.
var ErrNoLeader = errors.New("concurrency: election has no leader")

// Election is leader election on top of a store-enforced lock. The
// election's name is the lock's key; each candidate stores its value under
// name + "/candidates/" + its owner id, attached to its session's lease.
// The leader is the lock's holder, its term is the lock's fencing token
// (strictly increasing), and its writes made
// client.WithLock(leadership.Handle()) are refused by the store once it
// has been deposed. That is the fencing etcd's election lacks.
type Election struct {
	s    *Session
	name string
}

// NewElection returns the election called name on session s.
func NewElection(s *Session, name string) *Election { return &Election{s: s, name: name} }

// LeaderInfo is a leader as observed: its value and its term.
type LeaderInfo struct {
	Value []byte
	Term  int64
	// Handle is the leader's lock grant.
	Handle client.LockHandle
}

func candidateKey(name, owner string) string { return name + "/candidates/" + owner }

// Leadership is a won campaign.
type Leadership struct {
	e      *Election
	h      client.LockHandle
	done   chan struct{}
	stop   chan struct{}
	once   sync.Once
	closed sync.Once
}

// Term is the leadership's fencing token: strictly larger than any
// earlier leader's.
func (l *Leadership) Term() int64 { return l.h.Token }

// Handle is the lock grant to pass to client.WithLock on every write the
// leader makes.
func (l *Leadership) Handle() client.LockHandle { return l.h }

// Done is closed when leadership is lost (the session ended, the lock was
// taken over, or Resign). Writes fenced by Handle are refused from then
// on whatever this channel says; Done is for stopping leader work early.
func (l *Leadership) Done() <-chan struct{} { return l.done }

func (l *Leadership) lost() { l.closed.Do(func() { close(l.done) }) }

// Campaign registers value and waits until this candidate leads or ctx
// ends (the candidacy is then withdrawn). The wait has no limit of its
// own, on the client or the server: a standby campaigning with
// context.Background() waits for hours if the leader leads for hours,
// across leader changes and member restarts (docs/locks.md, "Long
// waits").
func (e *Election) Campaign(ctx context.Context, value []byte) (*Leadership, error) {
	c := e.s.Client()
	var b [8]byte
	_, _ = rand.Read(b[:])
	owner := fmt.Sprintf("%x-%s", e.s.Lease(), hex.EncodeToString(b[:]))
	ck := candidateKey(e.name, owner)
	if _, err := c.Put(ctx, ck, value, client.WithLease(e.s.Lease())); err != nil {
		return nil, err
	}
	h, err := c.Acquire(ctx, e.name, 0, client.WithLockLease(e.s.Lease()), client.WithLockOwner(owner))
	if err != nil {
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _ = c.Delete(dctx, ck)
		cancel()
		return nil, err
	}
	l := &Leadership{e: e, h: h, done: make(chan struct{}), stop: make(chan struct{})}
	go l.monitor()
	return l, nil
}

// monitor closes Done when the session ends or the lock is no longer ours.
func (l *Leadership) monitor() {
	every := max(l.e.s.TTL()/4, 100*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-l.e.s.Done():
			l.lost()
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), every)
			info, err := l.e.s.Client().DescribeLock(ctx, l.e.name)
			cancel()
			if err == nil && (info.Holder == nil || *info.Holder != l.h) {
				l.lost()
				return
			}
		}
	}
}

// Proclaim changes the leader's value; client.ErrLocked if this
// leadership has been lost.
func (l *Leadership) Proclaim(ctx context.Context, value []byte) error {
	_, err := l.e.s.Client().Put(ctx, candidateKey(l.e.name, l.h.Owner), value,
		client.WithLease(l.e.s.Lease()), client.WithLock(l.h))
	return err
}

// Resign gives up leadership; the next candidate is elected at once.
// client.ErrLocked if it had already been lost.
func (l *Leadership) Resign(ctx context.Context) error {
	l.once.Do(func() { close(l.stop) })
	defer l.lost()
	c := l.e.s.Client()
	if _, err := c.Delete(ctx, candidateKey(l.e.name, l.h.Owner), client.WithLock(l.h)); err != nil {
		return err
	}
	return c.Release(ctx, l.h)
}

// Leader reports the current leader (ErrNoLeader if none), confirmed at a
// linearizable point: its value is read under its own handle.
func (e *Election) Leader(ctx context.Context) (*LeaderInfo, error) {
	return Leader(ctx, e.s.Client(), e.name)
}

// Leader reports the current leader of election name, as Election.Leader.
func Leader(ctx context.Context, c Client, name string) (*LeaderInfo, error) {
	for {
		info, err := c.DescribeLock(ctx, name)
		if err != nil {
			return nil, err
		}
		if info.Holder == nil {
			return nil, ErrNoLeader
		}
		h := *info.Holder
		kv, err := c.Get(ctx, candidateKey(name, h.Owner), client.WithLock(h))
		switch {
		case err == nil:
			return &LeaderInfo{Value: kv.Value, Term: h.Token, Handle: h}, nil
		case errors.Is(err, client.ErrLocked):
			continue // the leader changed between the two reads
		case errors.Is(err, client.ErrNotFound):
			// A lock holder that is not a candidate (someone locked the
			// name directly): a leader without a value.
			return &LeaderInfo{Term: h.Token, Handle: h}, nil
		default:
			return nil, err
		}
	}
}

// ObservePollInterval is how often Observe checks the leader.
var ObservePollInterval = 100 * time.Millisecond

// Observe reports leader changes (a new term or a proclaimed value) on the
// returned channel, starting with the current leader if there is one, until
// ctx ends; the channel is then closed. It polls Leader (lock grants are
// not key events a watch would see); a change and its reversal within one
// interval may be seen as none, but terms seen only grow.
func Observe(ctx context.Context, c Client, name string) <-chan LeaderInfo {
	ch := make(chan LeaderInfo, 1)
	go func() {
		defer close(ch)
		var last *LeaderInfo
		t := time.NewTicker(ObservePollInterval)
		defer t.Stop()
		for {
			li, err := Leader(ctx, c, name)
			if err == nil && (last == nil || li.Term > last.Term || (li.Term == last.Term && string(li.Value) != string(last.Value))) {
				select {
				case ch <- *li:
					last = li
				case <-ctx.Done():
					return
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return ch
}

// Observe is Observe on this election.
func (e *Election) Observe(ctx context.Context) <-chan LeaderInfo {
	return Observe(ctx, e.s.Client(), e.name)
}
