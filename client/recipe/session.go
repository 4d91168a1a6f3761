package recipe

import (
	"context"
	"errors"
	"fmt"
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
// Within one SessionStore, concurrent Updates of one token are batched:
// one of them reads the session once, applies every waiting fn in turn
// (each sees the previous one's result, as if they ran one after
// another) and writes the result with one conditional write. A hot
// session thus costs one store round trip per batch instead of a storm
// of conflicting attempts; across instances the conditional write keeps
// them correct.
type SessionStore struct {
	c      SessionStoreClient
	prefix string
	ttl    time.Duration

	// markerDir holds Update's write markers (session_write.go).
	markerDir string

	mu    sync.Mutex
	turns map[string]*sessionTurn
}

// sessionTurn is one token's waiting Updates; running says one of them
// leads: it applies the waiting ones as a batch, then hands the turn to
// the first that arrived meanwhile (so no caller works for others for
// longer than one batch).
type sessionTurn struct {
	pending []*sessionReq
	running bool
}

// sessionReq is one Update waiting in a turn.
type sessionReq struct {
	fn       func([]byte) ([]byte, error)
	taken    bool          // in a batch being applied: the waiter must wait for it
	promoted bool          // handed the turn: it leads the next batch
	promote  chan struct{} // closed when promoted
	done     chan struct{} // closed once out/err are set
	out      []byte
	err      error
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
	s.markerDir = sessionMarkerRoot + s.prefix
	if strings.HasPrefix(s.markerDir, s.prefix) {
		return nil, &client.Error{Kind: client.ErrInvalidInput, Msg: fmt.Sprintf("session store: the prefix %q would contain Update's markers under %q; choose a longer one", s.prefix, sessionMarkerRoot)}
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
// Update is exact across a leader change: a write whose outcome is
// unknown (the leader died after committing it, before replying) is
// neither returned as a failure nor recomputed. Each write carries a
// unique id, stored in a marker key written in the same transaction
// ("dkv.session-update/"+PREFIX+TOKEN, on the session's lease, holding
// the condition the write won and its id). Update reads the marker (or
// its history) back to learn whether its write applied, and otherwise resends the very
// same write, which the compare-and-swap on the session's mod revision
// lets apply at most once. So when Update returns nil, fn's result was
// applied exactly once; when it returns another error, it was not
// applied, except for ErrUnknownOutcome, which it returns only when ctx
// ends before the outcome can be learnt or the history that would tell
// has been compacted.
func (s *SessionStore) Update(ctx context.Context, token string, fn func(old []byte) ([]byte, error)) ([]byte, error) {
	key, err := s.key(token)
	if err != nil {
		return nil, err
	}
	req := &sessionReq{fn: fn, promote: make(chan struct{}), done: make(chan struct{})}
	s.mu.Lock()
	t := s.turns[token]
	if t == nil {
		t = &sessionTurn{}
		s.turns[token] = t
	}
	t.pending = append(t.pending, req)
	lead := !t.running
	t.running = true
	s.mu.Unlock()
	if !lead {
		select {
		case <-req.done:
			return req.out, req.err
		case <-req.promote:
			lead = ctx.Err() == nil
		case <-ctx.Done():
		}
	}
	if lead {
		s.lead(ctx, key, token, t)
		return req.out, req.err
	}
	s.mu.Lock()
	if req.taken {
		s.mu.Unlock()
		<-req.done // being applied: its outcome is coming
		return req.out, req.err
	}
	for i, r := range t.pending { // not started: withdraw it
		if r == req {
			t.pending = append(t.pending[:i], t.pending[i+1:]...)
			break
		}
	}
	if req.promoted {
		s.handOver(token, t)
	}
	s.mu.Unlock()
	return nil, ctx.Err()
}

// lead applies every waiting Update of the turn as one batch, then hands
// the turn over.
func (s *SessionStore) lead(ctx context.Context, key, token string, t *sessionTurn) {
	s.mu.Lock()
	batch := t.pending
	t.pending = nil
	for _, r := range batch {
		r.taken = true
	}
	s.mu.Unlock()
	s.applyBatch(ctx, key, batch)
	s.mu.Lock()
	s.handOver(token, t)
	s.mu.Unlock()
}

// handOver passes the turn to its first waiting Update, or ends it. s.mu
// is held.
func (s *SessionStore) handOver(token string, t *sessionTurn) {
	if len(t.pending) == 0 {
		t.running = false
		delete(s.turns, token)
		return
	}
	r := t.pending[0]
	r.promoted = true
	close(r.promote)
}

// applyBatch runs a batch's fns on the session in order and writes the
// result once, conditionally; on a conflict it reads again and runs them
// again. It sets every request's outcome.
func (s *SessionStore) applyBatch(ctx context.Context, key string, batch []*sessionReq) {
	finish := func(err error) {
		for _, r := range batch {
			if err != nil && r.err == nil {
				r.out, r.err = nil, err
			}
			close(r.done)
		}
	}
	var lease int64 // granted for a new session, kept across attempts
	defer func() {
		if lease != 0 { // granted but not used: another write created the session
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = s.c.Revoke(rctx, lease)
			cancel()
		}
	}()
	for attempt := 0; ; attempt++ {
		rr, err := s.c.Range(ctx, key)
		if err != nil {
			finish(err)
			return
		}
		var kv *client.KeyValue
		var cur []byte
		if len(rr.KVs) > 0 {
			kv = rr.KVs[0]
			cur = kv.Value
		}
		changed := false
		for _, r := range batch {
			next, err := r.fn(cur)
			r.out, r.err = next, err
			if err == nil {
				cur, changed = next, true
			}
		}
		if !changed { // every fn failed: nothing to write
			finish(nil)
			return
		}
		w := &sessionWrite{key: key, marker: s.markerDir + strings.TrimPrefix(key, s.prefix), data: cur, id: newWriteID()}
		if kv == nil {
			if lease == 0 {
				g, err := s.c.Grant(ctx, s.ttl)
				if err != nil {
					finish(err)
					return
				}
				lease = g.ID
			}
			w.create, w.cond, w.lease = true, rr.Revision, lease
		} else {
			w.cond, w.lease = kv.ModRevision, kv.Lease
		}
		err = s.write(ctx, w)
		if err == nil {
			if w.create {
				lease = 0
			}
			finish(nil)
			return
		}
		// Another write came first, or the session's lease expired under
		// us (the key went with it): read again.
		if !errors.Is(err, errWriteLost) {
			if w.create && errors.Is(err, client.ErrUnknownOutcome) {
				lease = 0 // the session may live on it: keep it
			}
			finish(err)
			return
		}
		for _, r := range batch {
			r.out, r.err = nil, nil
		}
		// Back off, randomly and more after each conflict, so that the
		// instances writing one hot session do not keep colliding.
		d := time.Duration(rand.Int64N(int64(time.Millisecond) << min(attempt, 4)))
		select {
		case <-time.After(d):
		case <-ctx.Done():
			finish(ctx.Err())
			return
		}
	}
}
