package recipe

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"time"

	"github.com/dkv-io/dkv/client"
)

// sessionMarkerRoot is where Update keeps its write markers: one key
// per session, MARKERROOT+PREFIX+TOKEN, whose value "COND/ID" names the
// last Update that wrote the session: the condition it won and its
// write id. It is outside every sensible session prefix so that List and
// the adapters never see a marker.
const sessionMarkerRoot = "dkv.session-update/"

// sessionWrite is one conditional write of a batch's result. Every
// attempt at it (a resend after an unknown outcome) carries the same
// data, condition and id, so whichever copies reach the store, at most
// one applies: the condition is gone once one has.
type sessionWrite struct {
	key    string
	marker string // the session's marker key
	data   []byte
	create bool  // the session did not exist: the condition is its absence
	cond   int64 // the version read's mod revision; for a create, the read's revision
	lease  int64
	id     string // unique to this write
}

// mark is the marker's value when w is the write that won its
// condition.
func (w *sessionWrite) mark() string { return fmt.Sprintf("%020d/%s", w.cond, w.id) }

// wonBy reports whether marker value v names a write that won w's
// condition.
func (w *sessionWrite) wonBy(v []byte) bool {
	return strings.HasPrefix(string(v), fmt.Sprintf("%020d/", w.cond))
}

func newWriteID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// errWriteLost: the condition of a write did not hold, and none of its
// copies applied.
var errWriteLost = errors.New("session write lost the race")

// commit sends w once: if the condition holds it writes the data and
// the marker (naming w's condition and id, on the session's lease, so it
// expires with the session) in one transaction.
func (s *SessionStore) commit(ctx context.Context, w *sessionWrite) error {
	cmp := client.ModRevision(w.key).Equal(w.cond)
	if w.create {
		cmp = client.Missing(w.key)
	}
	r, err := s.c.Txn(ctx).If(cmp).Then(
		client.OpPut(w.key, w.data, client.WithLease(w.lease)),
		client.OpPut(w.marker, []byte(w.mark()), client.WithLease(w.lease)),
	).Commit()
	if err != nil {
		return err
	}
	if !r.Succeeded {
		return errWriteLost
	}
	return nil
}

// writeOutcome is what resolve learnt of a write whose outcome was
// unknown.
type writeOutcome int

const (
	writeApplied writeOutcome = iota // one copy of it applied
	writePending                     // none applied yet; its condition still holds, so a resend is safe
	writeLost                        // none applied, and none can: the condition is gone
)

// resolve finds out whether a write whose outcome was unknown applied,
// with linearizable reads. Only one write can win w's condition; if the
// marker names it, that settles it. If a later write has replaced the
// marker since, the history tells: the first change of the session after
// w.cond is the winner's (or a plain Put's, with no marker of that
// condition), and the marker as of that revision names it.
func (s *SessionStore) resolve(ctx context.Context, w *sessionWrite) (writeOutcome, error) {
	m, err := s.c.Get(ctx, w.marker)
	switch {
	case err == nil && string(m.Value) == w.mark():
		return writeApplied, nil
	case err == nil && w.wonBy(m.Value):
		return writeLost, nil
	case err != nil && !errors.Is(err, client.ErrNotFound):
		return 0, err
	}
	rr, err := s.c.Range(ctx, w.key)
	if err != nil {
		return 0, err
	}
	if !s.changed(rr.KVs, w) {
		return writePending, nil
	}
	// The session changed after the condition and the marker names a
	// later write (or none): find the first revision at which it had
	// changed.
	lo, hi := w.cond, rr.Revision // unchanged at lo, changed at hi
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		at, err := s.c.Range(ctx, w.key, client.WithRev(mid))
		if err != nil {
			return 0, s.historyErr(err)
		}
		if s.changed(at.KVs, w) {
			hi = mid
		} else {
			lo = mid
		}
	}
	m, err = s.c.Get(ctx, w.marker, client.WithRev(hi))
	switch {
	case err == nil && string(m.Value) == w.mark():
		return writeApplied, nil
	case err == nil || errors.Is(err, client.ErrNotFound):
		// Someone else's write, or a plain Put or Delete, came first.
		return writeLost, nil
	}
	return 0, s.historyErr(err)
}

// changed reports whether the session, as read, is no longer the
// version w was conditioned on.
func (s *SessionStore) changed(kvs []*client.KeyValue, w *sessionWrite) bool {
	if w.create {
		return len(kvs) > 0
	}
	return len(kvs) == 0 || kvs[0].ModRevision != w.cond
}

// historyErr: without the history, whether the write applied cannot be
// known.
func (s *SessionStore) historyErr(err error) error {
	if errors.Is(err, client.ErrCompacted) {
		return fmt.Errorf("%w: session update: the history that would tell whether it applied is compacted: %w", client.ErrUnknownOutcome, err)
	}
	return err
}

// write commits w exactly once or not at all. It returns nil when one
// copy of w applied and errWriteLost when none did and none can (the
// caller reads again and recomputes). After an unknown outcome it never
// recomputes blindly: it resolves the outcome, resends the very same
// write while its condition still holds, and gives up (with
// ErrUnknownOutcome) only when ctx ends first or the history is gone.
func (s *SessionStore) write(ctx context.Context, w *sessionWrite) error {
	uncertain := false // a copy of w may have applied, or still may
	resend := true
	for attempt := 0; ; attempt++ {
		if resend {
			err := s.commit(ctx, w)
			if err == nil {
				return nil
			}
			if !uncertain {
				switch {
				case errors.Is(err, errWriteLost), errors.Is(err, client.ErrLeaseNotFound):
					return errWriteLost
				case !errors.Is(err, client.ErrUnknownOutcome):
					return err
				}
			}
			// Once a copy is unaccounted for, even a refusal or a
			// conflict says nothing of it: resolve.
			uncertain = true
		}
		out, err := s.resolve(ctx, w)
		resend = false
		if err == nil {
			switch out {
			case writeApplied:
				return nil
			case writeLost:
				return errWriteLost
			}
			resend = true
		} else if errors.Is(err, client.ErrUnknownOutcome) {
			return err
		}
		// Unresolved (the cluster is electing a leader) or pending: wait a
		// little, then try again.
		d := time.Duration(1+bits.Len(uint(attempt))) * 10 * time.Millisecond
		select {
		case <-time.After(min(d, 200*time.Millisecond)):
		case <-ctx.Done():
			return fmt.Errorf("%w: session update: %w", client.ErrUnknownOutcome, ctx.Err())
		}
	}
}
