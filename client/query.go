package client

import (
	"context"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"google.golang.org/grpc"
)

// WithLabels sets the labels of a put (docs/data-model.md). Labels are
// part of the key's version, like the value: a put without WithLabels
// leaves the key with none, unless WithIgnoreLabels.
func WithLabels(labels map[string]string) OpOption {
	return func(c *opConfig) { c.labels = labels }
}

// WithIgnoreLabels keeps the key's current labels on a put; the key must
// exist.
func WithIgnoreLabels() OpOption { return func(c *opConfig) { c.ignoreLabels = true } }

// LabelCmp starts a compare on one of a key's labels.
type LabelCmp struct{ key, label string }

// Label compares key's label name: client.Label("k", "state").Equal("open").
// A missing label (or key) is absent: Equal, Greater and Less fail on
// it, NotEqual holds.
func Label(key, name string) LabelCmp { return LabelCmp{key, name} }

func (l LabelCmp) cmp(r CmpResult, v string) Cmp {
	return Cmp{Key: l.key, Target: CmpLabel, Label: l.label, Result: r, Value: []byte(v)}
}

// Equal holds when the label is present and equals v.
func (l LabelCmp) Equal(v string) Cmp { return l.cmp(Equal, v) }

// NotEqual holds when the label is absent or differs from v.
func (l LabelCmp) NotEqual(v string) Cmp { return l.cmp(NotEqual, v) }

// Greater holds when the label is present and sorts after v.
func (l LabelCmp) Greater(v string) Cmp { return l.cmp(Greater, v) }

// Less holds when the label is present and sorts before v.
func (l LabelCmp) Less(v string) Cmp { return l.cmp(Less, v) }

// Present holds when the key has the label.
func (l LabelCmp) Present() Cmp {
	return Cmp{Key: l.key, Target: CmpLabel, Label: l.label, LabelPresence: true, Exists: true}
}

// Absent holds when the key does not have the label (or does not exist).
func (l LabelCmp) Absent() Cmp {
	return Cmp{Key: l.key, Target: CmpLabel, Label: l.label, LabelPresence: true, Exists: false}
}

// QueryMarker says how a watch-by-query event relates to the result.
type QueryMarker int

const (
	// QueryNone: not a watch by query.
	QueryNone QueryMarker = iota
	// QueryEnter: the key did not match before and matches now.
	QueryEnter
	// QueryChange: the key matched before and still matches.
	QueryChange
	// QueryLeave: the key matched before and no longer does (or was
	// deleted).
	QueryLeave
)

func (m QueryMarker) String() string {
	switch m {
	case QueryEnter:
		return "ENTER"
	case QueryChange:
		return "CHANGE"
	case QueryLeave:
		return "LEAVE"
	}
	return "NONE"
}

// WatchQuery watches the result of a query (docs/data-model.md): every
// event of a key entering, changing within or leaving it, marked
// (WatchEvent.Marker), with prev_kv, in revision order and with the same
// resume guarantees as WatchPrefix. WithInitialSnapshot's Initial holds
// the matching keys.
func (c *Client) WatchQuery(ctx context.Context, query string, opts ...WatchOption) (*Watch, error) {
	return c.WatchKey(ctx, "", append(opts, WithWatchQuery(query))...)
}

// WithWatchQuery makes a WatchKey with an empty key a watch by query
// (see WatchQuery).
func WithWatchQuery(query string) WatchOption {
	return watchOpt(func(c *watchConfig) { c.query = query })
}

// QueryOption configures a Query.
type QueryOption func(*dkvpb.QueryRequest)

// WithQueryLimit caps the keys of one page; QueryResult.Continuation
// fetches the next.
func WithQueryLimit(n int64) QueryOption { return func(r *dkvpb.QueryRequest) { r.Limit = n } }

// WithQueryRev queries the keyspace as of revision rev.
func WithQueryRev(rev int64) QueryOption { return func(r *dkvpb.QueryRequest) { r.Revision = rev } }

// WithQueryScan lets a query that no index serves scan its prefix.
func WithQueryScan() QueryOption { return func(r *dkvpb.QueryRequest) { r.Scan = true } }

// WithQueryOrderBy orders the result by a label's value (then key; keys
// without the label last) instead of by key.
func WithQueryOrderBy(label string) QueryOption {
	return func(r *dkvpb.QueryRequest) { r.OrderBy = label }
}

// WithQuerySerializable serves the query from the local member, possibly
// stale, without a quorum round.
func WithQuerySerializable() QueryOption {
	return func(r *dkvpb.QueryRequest) { r.Serializable = true }
}

// WithQueryKeysOnly leaves the values out.
func WithQueryKeysOnly() QueryOption { return func(r *dkvpb.QueryRequest) { r.KeysOnly = true } }

// WithContinuation fetches the page after the one that returned token
// (same query and order; the revision is the token's).
func WithContinuation(token []byte) QueryOption {
	return func(r *dkvpb.QueryRequest) { r.Continuation = token }
}

// QueryResult is one page of a query's result.
type QueryResult struct {
	// Revision is the revision the query read (every page of one query
	// reads the same one).
	Revision int64
	KVs      []*KeyValue
	// More is true when the limit cut the result short; Continuation
	// then fetches the next page.
	More         bool
	Continuation []byte
	// Plan says how the server answered, e.g. "index orders/ state".
	Plan string
}

// Query runs a label query, e.g. "prefix=orders/ state=open customer=42".
// It fails with ErrNoIndex, naming the index to create, when no index
// serves it, unless WithQueryScan.
func (c *Client) Query(ctx context.Context, query string, opts ...QueryOption) (*QueryResult, error) {
	req := &dkvpb.QueryRequest{Query: query}
	for _, o := range opts {
		if o != nil {
			o(req)
		}
	}
	var resp *dkvpb.QueryResponse
	err := c.call(ctx, false, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.query.Query(ctx, req, o...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &QueryResult{
		Revision: resp.GetHeader().GetRevision(), KVs: fromPBs(resp.GetKvs()),
		More: resp.GetMore(), Continuation: resp.GetContinuation(), Plan: resp.GetPlan(),
	}, nil
}

// Index is a declared label index.
type Index struct {
	ID     uint64
	Prefix string
	Label  string
	// CreatedRevision is the revision it was built at: it serves
	// queries at that revision and later.
	CreatedRevision int64
}

func indexFromPB(i *dkvpb.IndexInfo) Index {
	return Index{ID: i.GetId(), Prefix: string(i.GetPrefix()), Label: i.GetLabel(), CreatedRevision: i.GetCreatedRevision()}
}

// CreateIndex declares an index on label under prefix and builds it for
// the existing keys, in one raft entry. ErrConflict if it exists.
func (c *Client) CreateIndex(ctx context.Context, prefix, label string) (Index, error) {
	var resp *dkvpb.IndexCreateResponse
	err := c.call(ctx, true, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.query.CreateIndex(ctx, &dkvpb.IndexCreateRequest{Prefix: []byte(prefix), Label: label}, o...)
		return err
	})
	if err != nil {
		return Index{}, err
	}
	return indexFromPB(resp.GetIndex()), nil
}

// DropIndex removes an index; ErrNotFound if there is none.
func (c *Client) DropIndex(ctx context.Context, prefix, label string) error {
	return c.call(ctx, true, func(ctx context.Context, o ...grpc.CallOption) error {
		_, err := c.query.DropIndex(ctx, &dkvpb.IndexDropRequest{Prefix: []byte(prefix), Label: label}, o...)
		return err
	})
}

// ListIndexes lists the indexes in creation order.
func (c *Client) ListIndexes(ctx context.Context) ([]Index, error) {
	var resp *dkvpb.ListIndexesResponse
	err := c.call(ctx, false, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.query.ListIndexes(ctx, &dkvpb.ListIndexesRequest{}, o...)
		return err
	})
	if err != nil {
		return nil, err
	}
	var out []Index
	for _, i := range resp.GetIndexes() {
		out = append(out, indexFromPB(i))
	}
	return out, nil
}
