// Package scsstore is a github.com/alexedwards/scs/v2 session store on
// DKV: it implements scs.Store, scs.CtxStore, scs.IterableStore and
// scs.IterableCtxStore on recipe.SessionStore, so every instance of a
// web service shares the sessions, and each expires with its lease.
//
// It is its own Go module, so DKV's client does not depend on scs.
package scsstore

import (
	"context"
	"time"

	"github.com/dkv-io/dkv/client/recipe"
)

// Store is an scs store on a recipe.SessionStore.
type Store struct {
	s *recipe.SessionStore
}

// New returns an scs store on s.
func New(s *recipe.SessionStore) *Store { return &Store{s: s} }

// FindCtx returns the session's data; found is false when it does not
// exist or expired.
func (st *Store) FindCtx(ctx context.Context, token string) ([]byte, bool, error) {
	return st.s.Get(ctx, token)
}

// CommitCtx writes the session to expire at expiry (at least 1s from
// now: the lease's TTL granularity).
func (st *Store) CommitCtx(ctx context.Context, token string, b []byte, expiry time.Time) error {
	return st.s.Put(ctx, token, b, max(time.Until(expiry), time.Second))
}

// DeleteCtx removes the session.
func (st *Store) DeleteCtx(ctx context.Context, token string) error {
	return st.s.Delete(ctx, token)
}

// AllCtx returns every live session's data by token.
func (st *Store) AllCtx(ctx context.Context) (map[string][]byte, error) {
	return st.s.List(ctx)
}

// Find is FindCtx without a context.
func (st *Store) Find(token string) ([]byte, bool, error) {
	return st.FindCtx(context.Background(), token)
}

// Commit is CommitCtx without a context.
func (st *Store) Commit(token string, b []byte, expiry time.Time) error {
	return st.CommitCtx(context.Background(), token, b, expiry)
}

// Delete is DeleteCtx without a context.
func (st *Store) Delete(token string) error {
	return st.DeleteCtx(context.Background(), token)
}

// All is AllCtx without a context.
func (st *Store) All() (map[string][]byte, error) {
	return st.AllCtx(context.Background())
}
