// Package concurrency holds coordination recipes built on the DKV client:
// Session (a lease kept alive for the life of a process), and the locks
// and elections built on it.
package concurrency

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dkv-io/dkv/client"
)

// Client is what the recipes use of a DKV client: keys, leases and locks.
// *client.Client satisfies it, and so does anything wrapping one (a key
// namespace, instrumentation) or standing in for one in a test.
type Client interface {
	client.KV
	client.Lease
	client.Locker
}

// DefaultSessionTTL is a Session's lease TTL unless WithTTL says
// otherwise: how long after its process dies the session's keys (locks,
// candidacies) disappear.
const DefaultSessionTTL = 15 * time.Second

// SessionOption configures NewSession.
type SessionOption func(*sessionConfig)

type sessionConfig struct {
	ttl   time.Duration
	lease int64
}

// WithTTL sets the session lease's TTL (1s to 1 year).
func WithTTL(d time.Duration) SessionOption { return func(c *sessionConfig) { c.ttl = d } }

// WithLease makes the session adopt an existing lease instead of granting
// one.
func WithLease(id int64) SessionOption { return func(c *sessionConfig) { c.lease = id } }

// Session is a lease kept alive in the background for as long as the
// session is open. Keys written with WithLease(s.Lease()) vanish when the
// session ends: by Close, or by its lease expiring because this process
// died or lost contact with the cluster for longer than the TTL. Done is
// closed when the lease is lost; anything the session protected (a lock, a
// leadership) must then be considered gone.
type Session struct {
	c      Client
	id     int64
	ttl    time.Duration
	cancel context.CancelFunc
	done   chan struct{}

	mu  sync.Mutex
	err error
}

// NewSession grants a lease (or adopts one, WithLease) and keeps it alive
// until Close or Orphan.
func NewSession(ctx context.Context, c Client, opts ...SessionOption) (*Session, error) {
	cfg := sessionConfig{ttl: DefaultSessionTTL}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	id, ttl := cfg.lease, cfg.ttl
	if id == 0 {
		g, err := c.Grant(ctx, cfg.ttl)
		if err != nil {
			return nil, err
		}
		id, ttl = g.ID, g.TTL
	}
	kctx, cancel := context.WithCancel(context.Background())
	lost, err := c.KeepAlive(kctx, id)
	if err != nil {
		cancel()
		return nil, err
	}
	s := &Session{c: c, id: id, ttl: ttl, cancel: cancel, done: make(chan struct{})}
	go func() {
		if err, ok := <-lost; ok && err != nil {
			s.mu.Lock()
			s.err = err
			s.mu.Unlock()
		}
		close(s.done)
	}()
	return s, nil
}

// Client is the client the session runs on.
func (s *Session) Client() Client { return s.c }

// Lease is the session's lease id.
func (s *Session) Lease() int64 { return s.id }

// TTL is the session lease's TTL.
func (s *Session) TTL() time.Duration { return s.ttl }

// Done is closed when the session ends: its lease was lost, or Close or
// Orphan was called.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err says why the session ended: client.ErrLeaseNotFound (revoked or
// expired on the server) or client.ErrLeaseExpired (no keep-alive
// acknowledged within the TTL); nil while it is open or if it was closed.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Orphan stops keeping the lease alive without revoking it: its keys
// stay until it expires.
func (s *Session) Orphan() {
	s.cancel()
	<-s.done
}

// Close stops the keep-alives and revokes the lease, deleting its keys at
// once. A lease already gone is not an error.
func (s *Session) Close() error {
	s.Orphan()
	ctx, cancel := context.WithTimeout(context.Background(), max(s.ttl, 5*time.Second))
	defer cancel()
	if err := s.c.Revoke(ctx, s.id); err != nil && !errors.Is(err, client.ErrLeaseNotFound) {
		return err
	}
	return nil
}
