package recipe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/concurrency"
)

// presencePrefix is where presence keeps its members:
// dkv.presence/GROUP/ID -> metadata, on the member's session lease.
const presencePrefix = "dkv.presence/"

// MaxPresenceName is the longest group or member id, in bytes.
const MaxPresenceName = 256

// Member is one registered member of a presence group.
type Member struct {
	Group, ID string
	Metadata  []byte
	// Lease is the session lease the registration lives on.
	Lease int64
	// Joined is the revision that registered the member, Revision the one
	// that last changed it.
	Joined, Revision int64
}

func presenceKey(group, id string) string { return presencePrefix + group + "/" + id }

func checkPresenceName(what, s string) error {
	if s == "" || len(s) > MaxPresenceName || strings.Contains(s, "/") {
		return &client.Error{Kind: client.ErrInvalidInput, Msg: fmt.Sprintf("presence %s %q: must be 1 to %d bytes without '/'", what, s, MaxPresenceName)}
	}
	return nil
}

func memberOf(group string, kv *client.KeyValue) Member {
	return Member{
		Group: group, ID: strings.TrimPrefix(kv.Key, presencePrefix+group+"/"),
		Metadata: kv.Value, Lease: kv.Lease, Joined: kv.CreateRevision, Revision: kv.ModRevision,
	}
}

// Registration is a member's registration, alive as long as its session.
type Registration struct {
	s         *concurrency.Session
	group, id string
}

// Register makes id a member of group, with metadata, on s's lease: the
// member leaves when Deregister is called, the session is closed, or its
// lease expires (the process died or lost the cluster for longer than the
// session TTL). Registering an id again on the same session updates its
// metadata; an id held by another live session is refused with
// ErrConflict (until that session's lease ends).
func Register(ctx context.Context, s *concurrency.Session, group, id string, metadata []byte) (*Registration, error) {
	if err := checkPresenceName("group", group); err != nil {
		return nil, err
	}
	if err := checkPresenceName("id", id); err != nil {
		return nil, err
	}
	r := &Registration{s: s, group: group, id: id}
	if err := r.put(ctx, metadata); err != nil {
		return nil, err
	}
	return r, nil
}

// put writes the member's key if it is absent or already on this
// session's lease.
func (r *Registration) put(ctx context.Context, metadata []byte) error {
	c, key := r.s.Client(), presenceKey(r.group, r.id)
	tr, err := c.Txn(ctx).If(client.Missing(key)).
		Then(client.OpPut(key, metadata, client.WithLease(r.s.Lease()))).
		Else(client.OpGet(key)).Commit()
	if err != nil {
		return err
	}
	if tr.Succeeded {
		return nil
	}
	var cur *client.KeyValue
	if g := tr.Responses[0].Get; g != nil && len(g.KVs) == 1 {
		cur = g.KVs[0]
	}
	if cur == nil {
		return r.put(ctx, metadata) // deleted meanwhile
	}
	if cur.Lease != r.s.Lease() {
		return &client.Error{Kind: client.ErrConflict, Msg: fmt.Sprintf("presence %s/%s is registered by another session (lease %x)", r.group, r.id, cur.Lease)}
	}
	_, err = c.Put(ctx, key, metadata, client.WithLease(r.s.Lease()), client.IfModRevision(cur.ModRevision))
	if errors.Is(err, client.ErrConflict) {
		return r.put(ctx, metadata)
	}
	return err
}

// Update replaces the member's metadata (watchers see an update).
func (r *Registration) Update(ctx context.Context, metadata []byte) error {
	return r.put(ctx, metadata)
}

// Deregister removes the member now (watchers see a leave). The session
// stays open.
func (r *Registration) Deregister(ctx context.Context) error {
	key := presenceKey(r.group, r.id)
	// Only our own key: a later registration by another session stays.
	_, err := r.s.Client().Txn(ctx).If(client.Exists(key)).Then(client.OpDelete(key)).Commit()
	return err
}

// Done is closed when the registration's session ends.
func (r *Registration) Done() <-chan struct{} { return r.s.Done() }

// Members lists group's members in id order, with the revision read.
func Members(ctx context.Context, kv client.KV, group string) ([]Member, int64, error) {
	if err := checkPresenceName("group", group); err != nil {
		return nil, 0, err
	}
	rr, err := kv.List(ctx, presencePrefix+group+"/")
	if err != nil {
		return nil, 0, err
	}
	out := make([]Member, 0, len(rr.KVs))
	for _, kv := range rr.KVs {
		out = append(out, memberOf(group, kv))
	}
	return out, rr.Revision, nil
}

// MemberEventType says what happened to a member.
type MemberEventType int

const (
	// MemberJoin: a member registered.
	MemberJoin MemberEventType = iota
	// MemberUpdate: a member's metadata (or lease) changed.
	MemberUpdate
	// MemberLeave: a member deregistered or its session ended.
	MemberLeave
)

func (t MemberEventType) String() string {
	return [...]string{"join", "update", "leave"}[t]
}

// MemberEvent is one change to a group.
type MemberEvent struct {
	Type MemberEventType
	// Member is the member after the change; for a leave, as it was.
	Member Member
	// Revision is the store revision the group is at after the change.
	Revision int64
}

// MemberWatch follows a group: Initial, then Events.
type MemberWatch struct {
	cache   *Cache
	initial []Member
	rev     int64
	events  chan MemberEvent
	cancel  context.CancelFunc
}

// WatchMembers returns the group's current members (Initial, at
// Revision) and then delivers each join, update and leave after that
// revision, in order, each once, including across compactions and
// reconnects (it is built on Cache: a leave that happened while the
// watch was cut off and the history compacted arrives as one leave).
// Events is closed when ctx ends or Close is called.
func WatchMembers(ctx context.Context, w client.Watcher, group string) (*MemberWatch, error) {
	if err := checkPresenceName("group", group); err != nil {
		return nil, err
	}
	cctx, cancel := context.WithCancel(ctx)
	mw := &MemberWatch{events: make(chan MemberEvent, 64), cancel: cancel}
	var (
		mu      sync.Mutex
		cache   *Cache
		started bool
	)
	send := func(t MemberEventType, kv *client.KeyValue) {
		mu.Lock()
		c, live := cache, started
		mu.Unlock()
		m := memberOf(group, kv)
		if !live {
			mw.initial = append(mw.initial, m)
			return
		}
		select {
		case mw.events <- MemberEvent{Type: t, Member: m, Revision: c.Revision()}:
		case <-cctx.Done():
		}
	}
	h := CacheHandler{
		OnAdd:    func(kv *client.KeyValue) { send(MemberJoin, kv) },
		OnUpdate: func(_, cur *client.KeyValue) { send(MemberUpdate, cur) },
		OnDelete: func(old *client.KeyValue) { send(MemberLeave, old) },
	}
	ready := func(c *Cache) {
		mu.Lock()
		cache, started = c, true
		mu.Unlock()
		mw.rev = c.Revision()
	}
	c, err := NewCache(cctx, w, presencePrefix+group+"/", WithCacheHandler(h), func(cfg *cacheConfig) { cfg.ready = ready })
	if err != nil {
		cancel()
		return nil, err
	}
	mw.cache = c
	go func() {
		<-c.Done()
		cancel()
		close(mw.events)
	}()
	return mw, nil
}

// Initial is the group's members when the watch started, in id order.
func (mw *MemberWatch) Initial() []Member { return mw.initial }

// Revision is the revision Initial was read at.
func (mw *MemberWatch) Revision() int64 { return mw.rev }

// Events delivers the changes after Revision.
func (mw *MemberWatch) Events() <-chan MemberEvent { return mw.events }

// Members is the group as the watch currently sees it, from memory.
func (mw *MemberWatch) Members() []Member {
	kvs := mw.cache.List("")
	out := make([]Member, 0, len(kvs))
	for _, kv := range kvs {
		group, _, _ := strings.Cut(strings.TrimPrefix(kv.Key, presencePrefix), "/")
		out = append(out, memberOf(group, kv))
	}
	return out
}

// Close stops the watch.
func (mw *MemberWatch) Close() {
	mw.cancel()
	mw.cache.Close()
}
