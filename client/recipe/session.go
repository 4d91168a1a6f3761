package recipe

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/dkv-io/dkv/client"
)

// SessionStoreClient is what the session store uses of a DKV client:
// keys and leases. *client.Client satisfies it.
type SessionStoreClient interface {
	client.KV
	client.Lease
}

// DefaultSessionStoreTTL is how long a session created by Update lives
// unless WithSessionStoreTTL says otherwise.
const DefaultSessionStoreTTL = 24 * time.Hour

// SessionStoreOption configures NewSessionStore.
type SessionStoreOption func(*SessionStore)

// WithSessionStorePrefix keeps the sessions under prefix (default
// "dkv.session/"), e.g. one prefix per application.
func WithSessionStorePrefix(prefix string) SessionStoreOption {
	return func(s *SessionStore) { s.prefix = prefix }
}

// WithSessionStoreTTL sets the lifetime of a session that Update creates.
func WithSessionStoreTTL(d time.Duration) SessionStoreOption {
	return func(s *SessionStore) { s.ttl = d }
}

// SessionStore keeps web sessions (a token's opaque data) for stateless
// instances: every instance reads and writes the same session, and
// Update changes one atomically, so two requests of one session racing
// on a cart lose neither change. Each session is one key,
// PREFIX+TOKEN, on a lease of its own whose TTL is the session's
// expiry: the cluster deletes an expired session by itself.
//
// Within one SessionStore, Updates of one token take turns (a local
// queue per token), so a hot session costs one store round trip per
// update instead of a storm of conflicting attempts; across instances
// the conditional write keeps them correct.
type SessionStore struct {
	c      SessionStoreClient
	prefix string
	ttl    time.Duration

	mu    sync.Mutex
	turns map[string]*sessionTurn
}

// sessionTurn is one token's local queue: a 1-slot semaphore and the
// number of Updates using it (it is dropped at 0).
type sessionTurn struct {
	sem  chan struct{}
	refs int
}

func (s *SessionStore) takeTurn(ctx context.Context, token string) (release func(), err error) {
	s.mu.Lock()
	t := s.turns[token]
	if t == nil {
		t = &sessionTurn{sem: make(chan struct{}, 1)}
		s.turns[token] = t
	}
	t.refs++
	s.mu.Unlock()
	done := func() {
		s.mu.Lock()
		if t.refs--; t.refs == 0 {
			delete(s.turns, token)
		}
		s.mu.Unlock()
	}
	select {
	case t.sem <- struct{}{}:
		return func() { <-t.sem; done() }, nil
	case <-ctx.Done():
		done()
		return nil, ctx.Err()
	}
}

// NewSessionStore returns a store on c.
func NewSessionStore(c SessionStoreClient, opts ...SessionStoreOption) (*SessionStore, error) {
	s := &SessionStore{c: c, prefix: "dkv.session/", ttl: DefaultSessionStoreTTL, turns: map[string]*sessionTurn{}}
	for _, o := range opts {
		o(s)
	}
	if s.prefix == "" || s.ttl < time.Second {
		return nil, &client.Error{Kind: client.ErrInvalidInput, Msg: "session store: the prefix must not be empty and the TTL must be at least 1s"}
	}
	return s, nil
}

func (s *SessionStore) key(token string) (string, error) {
	if token == "" {
		return "", &client.Error{Kind: client.ErrInvalidInput, Msg: "session token must not be empty"}
	}
	return s.prefix + token, nil
}

// Get returns the session's data; found is false when it does not exist
// or expired.
func (s *SessionStore) Get(ctx context.Context, token string) (data []byte, found bool, err error) {
	key, err := s.key(token)
	if err != nil {
		return nil, false, err
	}
	kv, err := s.c.Get(ctx, key)
	if errors.Is(err, client.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return kv.Value, true, nil
}

// Put writes the session's data, to expire after ttl (at least 1s),
// replacing what was there.
func (s *SessionStore) Put(ctx context.Context, token string, data []byte, ttl time.Duration) error {
	key, err := s.key(token)
	if err != nil {
		return err
	}
	if ttl < time.Second {
		return &client.Error{Kind: client.ErrInvalidInput, Msg: "session TTL must be at least 1s"}
	}
	r, err := s.c.Put(ctx, key, data, client.WithTTL(ttl), client.WithPrevKV())
	if err != nil {
		return err
	}
	s.dropLease(ctx, r.PrevKV, r.Lease)
	return nil
}

// dropLease revokes the lease of a replaced version, which no key uses
// any more (best effort: it would expire anyway).
func (s *SessionStore) dropLease(ctx context.Context, prev *client.KeyValue, cur int64) {
	if prev != nil && prev.Lease != 0 && prev.Lease != cur {
		_ = s.c.Revoke(ctx, prev.Lease)
	}
}

// Delete removes the session (and its lease).
func (s *SessionStore) Delete(ctx context.Context, token string) error {
	key, err := s.key(token)
	if err != nil {
		return err
	}
	r, err := s.c.Delete(ctx, key, client.WithPrevKV())
	if err != nil {
		return err
	}
	for _, kv := range r.PrevKVs {
		s.dropLease(ctx, kv, 0)
	}
	return nil
}

// List returns every live session's data by token.
func (s *SessionStore) List(ctx context.Context) (map[string][]byte, error) {
	rr, err := s.c.List(ctx, s.prefix)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(rr.KVs))
	for _, kv := range rr.KVs {
		out[strings.TrimPrefix(kv.Key, s.prefix)] = kv.Value
	}
	return out, nil
}

// Update changes the session atomically: fn gets its current data (nil
// if it does not exist) and returns the new data, which is written only
// if nobody changed the session meanwhile; otherwise fn runs again on the
// newer data. An existing session keeps its expiry; a new one gets the
// store's TTL. fn must have no side effects (it may run several times);
// an error from it aborts the update. Update returns the data written.
//
// A write whose outcome is unknown (ErrUnknownOutcome: the connection or
// the leader was lost before the reply) is returned, not retried: it may
// have been applied, and applying fn twice would be the very lost or
// doubled update Update exists to prevent.
func (s *SessionStore) Update(ctx context.Context, token string, fn func(old []byte) ([]byte, error)) ([]byte, error) {
	key, err := s.key(token)
	if err != nil {
		return nil, err
	}
	release, err := s.takeTurn(ctx, token)
	if err != nil {
		return nil, err
	}
	defer release()
	for attempt := 0; ; attempt++ {
		kv, err := s.c.Get(ctx, key)
		var old []byte
		switch {
		case errors.Is(err, client.ErrNotFound):
			kv = nil
		case err != nil:
			return nil, err
		default:
			old = kv.Value
		}
		next, err := fn(old)
		if err != nil {
			return nil, err
		}
		if kv == nil {
			_, err = s.c.Put(ctx, key, next, client.IfAbsent(), client.WithTTL(s.ttl))
		} else {
			_, err = s.c.Put(ctx, key, next, client.WithLease(kv.Lease), client.IfModRevision(kv.ModRevision))
		}
		if err == nil {
			return next, nil
		}
		// A conflict, or the session's lease expired under us (the key
		// went with it): read again.
		if !errors.Is(err, client.ErrConflict) && !errors.Is(err, client.ErrLeaseNotFound) {
			return nil, err
		}
		// Back off, randomly and more after each conflict, so many
		// writers of one hot session make progress instead of colliding.
		d := time.Duration(rand.Int64N(int64(time.Millisecond) << min(attempt, 4)))
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
