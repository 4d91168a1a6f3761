package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/state"
	"github.com/dkv-io/dkv/internal/storekeys"
)

// listQuery is what a GET list endpoint lists: the keys under prefix
// (physical: in the request's store's key space) from one consistent
// view of the applied state, at most limit of them.
type listQuery struct {
	ctx    context.Context // the caller's credentials, for per-key checks
	store  storekeys.Mapper
	prefix []byte
	limit  int
	view   state.View
}

// serveList serves a GET list endpoint (/v1/locks, /v1/ratelimits):
// ?prefix=P, in the request's store (?store= or Dkv-Store), and ?limit=N
// (1 to max; default max); then a linearizable read, so the list holds
// every write acknowledged before the request, and one consistent view
// of the applied state for list. It answers list's value as JSON, or
// list's error (already the wire error to send).
func (a *API) serveList(w http.ResponseWriter, r *http.Request, max int, list func(q listQuery) (any, error)) {
	q := r.URL.Query()
	prefix := []byte(q.Get("prefix"))
	limit := max
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > max {
			Error(w, dkverr.New(dkverr.InvalidInput, "limit %q must be an integer from 1 to %d", v, max))
			return
		}
		limit = n
	}
	ctx, store, err := a.n.RequestStore(r)
	if err != nil {
		Error(w, a.n.WireError(err))
		return
	}
	if prefix, err = store.KeyPrefix(prefix); err != nil {
		Error(w, err)
		return
	}
	if err := a.n.WaitLinearizable(ctx); err != nil {
		Error(w, a.n.WireError(err))
		return
	}
	snap := a.n.Applied().Snapshot()
	defer snap.Close()
	resp, err := list(listQuery{ctx: ctx, store: store, prefix: prefix, limit: limit, view: snap})
	if err != nil {
		Error(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(resp)
}
