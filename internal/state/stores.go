package state

import (
	"bytes"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/keys"
	"github.com/dkv-io/dkv/internal/mvcc"
	"github.com/dkv-io/dkv/internal/storekeys"
	"google.golang.org/protobuf/proto"
)

// Named stores. Each has a record under keys.StorePrefix with its quota
// and usage (live keys, and their key and value bytes as the client
// names them). The usage is updated from the command's events in the same
// batch as the command, so it is exact and travels with snapshots; the
// quota is checked before the command writes anything (mvcc.Quota), so a
// refused write takes no revision.

func storeRecKey(name string) []byte {
	return append(append([]byte(nil), keys.StorePrefix...), name...)
}

// GetStore reads a store's record from r; ok is false if it does not
// exist.
func GetStore(r pebble.Reader, name string) (*dkvpb.StoreInfo, bool, error) {
	v, closer, err := r.Get(storeRecKey(name))
	if err == pebble.ErrNotFound {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer closer.Close()
	info := &dkvpb.StoreInfo{}
	if err := proto.Unmarshal(v, info); err != nil {
		return nil, false, err
	}
	return info, true, nil
}

// ListStores reads every store's record from r, in name order.
func ListStores(r pebble.Reader) ([]*dkvpb.StoreInfo, error) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: keys.StorePrefix, UpperBound: keys.StoreEnd})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []*dkvpb.StoreInfo
	for it.First(); it.Valid(); it.Next() {
		info := &dkvpb.StoreInfo{}
		if err := proto.Unmarshal(it.Value(), info); err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, it.Error()
}

// NotExistError is the refusal of a call that names a missing store.
func NotExistError(name string) error {
	return dkverr.New(dkverr.NotFound, "store %q does not exist (dkv store create %s)", name, name)
}

func putStore(b *pebble.Batch, info *dkvpb.StoreInfo) {
	v, err := proto.Marshal(info)
	must(err)
	must(b.Set(storeRecKey(info.Name), v, nil))
}

// storeQuota is the machine's mvcc.Quota: it reads the records through
// the batch being applied and sums the puts of one command (reset).
type storeQuota struct {
	b       *pebble.Batch
	pending map[string]*usage
}

type usage struct{ keys, bytes int64 }

func (q *storeQuota) reset(b *pebble.Batch) {
	q.b = b
	clear(q.pending)
}

func (q *storeQuota) Limited(key []byte) bool {
	return bytes.HasPrefix(key, []byte(storekeys.Reserved))
}

func (q *storeQuota) Admit(key []byte, exists bool, oldSize, newSize int) error {
	name, ok := storekeys.StoreOf(key)
	if !ok {
		return dkverr.New(dkverr.InvalidInput, "key %q is in the named stores' reserved range but names no store", key)
	}
	info, ok, err := GetStore(q.b, name)
	must(err)
	if !ok {
		return NotExistError(name)
	}
	if q.pending == nil {
		q.pending = map[string]*usage{}
	}
	p := q.pending[name]
	if p == nil {
		p = &usage{}
		q.pending[name] = p
	}
	pl := len(storekeys.Prefix(name))
	before, after := 0, newSize-pl // the client's key and value bytes
	if exists {
		before = oldSize - pl
	} else {
		p.keys++
	}
	growth := int64(after - before)
	p.bytes += growth
	if info.MaxKeys > 0 && !exists && info.Keys+p.keys > info.MaxKeys {
		return dkverr.New(dkverr.NoSpace, "store %q is at its quota of %d keys (it has %d): delete keys or raise it (dkv store set-quota %s --max-keys N)", name, info.MaxKeys, info.Keys, name)
	}
	if info.MaxBytes > 0 && growth > 0 && info.Bytes+p.bytes > info.MaxBytes {
		return dkverr.New(dkverr.NoSpace, "store %q is at its quota of %d bytes (it has %d; this write needs %d more): delete keys or raise it (dkv store set-quota %s --max-bytes N)", name, info.MaxBytes, info.Bytes, p.bytes, name)
	}
	return nil
}

// countStores adds a command's key changes to the usage of their stores.
func countStores(b *pebble.Batch, events []mvcc.Event) {
	var (
		names []string
		delta map[string]*usage
	)
	for _, e := range events {
		name, ok := storekeys.StoreOf(e.KV.GetKey())
		if !ok {
			continue
		}
		if delta == nil {
			delta = map[string]*usage{}
		}
		d := delta[name]
		if d == nil {
			d = &usage{}
			delta[name] = d
			names = append(names, name)
		}
		pl := int64(len(storekeys.Prefix(name)))
		if prev := e.PrevKV; prev != nil {
			d.keys--
			d.bytes -= int64(len(prev.Key)+len(prev.Value)) - pl
		}
		if e.Type == mvcc.EventPut {
			d.keys++
			d.bytes += int64(len(e.KV.Key)+len(e.KV.Value)) - pl
		}
	}
	slices.Sort(names)
	for _, name := range names {
		info, ok, err := GetStore(b, name)
		must(err)
		if !ok {
			continue // deleted with its keys by this very command
		}
		info.Keys += delta[name].keys
		info.Bytes += delta[name].bytes
		putStore(b, info)
	}
}

// applyStoreCreate creates a store or changes its quota.
func (m *Machine) applyStoreCreate(b *pebble.Batch, r *dkvpb.StoreCreateRequest) Result {
	if err := storekeys.ValidName(r.GetName()); err != nil {
		return m.refused(err)
	}
	if r.GetMaxKeys() < 0 || r.GetMaxBytes() < 0 {
		return m.refused(dkverr.New(dkverr.InvalidInput, "a quota must not be negative (max_keys %d, max_bytes %d); 0 is unlimited", r.GetMaxKeys(), r.GetMaxBytes()))
	}
	info, exists, err := GetStore(b, r.GetName())
	must(err)
	switch {
	case r.GetSetQuota() && !exists:
		return m.refused(NotExistError(r.GetName()))
	case !r.GetSetQuota() && exists:
		return m.refused(dkverr.New(dkverr.Conflict, "store %q already exists", r.GetName()))
	case !exists:
		info = &dkvpb.StoreInfo{Name: r.GetName(), CreateRevision: m.kv.Revision()}
	}
	info.MaxKeys, info.MaxBytes = r.GetMaxKeys(), r.GetMaxBytes()
	putStore(b, info)
	rev := m.kv.Revision()
	return Result{Resp: &dkvpb.StoreCreateResponse{Header: &dkvpb.ResponseHeader{Revision: rev}, Store: info}, Revision: rev}
}

// applyStoreDelete deletes a store; with force its keys too, at one
// revision.
func (m *Machine) applyStoreDelete(b *pebble.Batch, r *dkvpb.StoreDeleteRequest) Result {
	info, exists, err := GetStore(b, r.GetName())
	must(err)
	if !exists {
		return m.refused(NotExistError(r.GetName()))
	}
	if info.Keys > 0 && !r.GetForce() {
		return m.refused(dkverr.New(dkverr.Conflict, "store %q has %d keys: delete them first, or delete the store with them (dkv store delete %s --force)", r.GetName(), info.Keys, r.GetName()))
	}
	w := m.kv.Begin(b)
	start, end := mustMapper(r.GetName()).Span()
	resp, err := w.DeleteRange(&dkvpb.DeleteRangeRequest{Key: start, RangeEnd: end})
	if err != nil {
		// A delete without conditions or lock handle: only a locked key
		// refuses it, and then nothing was written.
		return m.refused(err)
	}
	must(b.Delete(storeRecKey(r.GetName()), nil))
	rev, ch := w.Finish()
	return Result{
		Resp:     &dkvpb.StoreDeleteResponse{Header: &dkvpb.ResponseHeader{Revision: rev}, Deleted: resp.GetDeleted()},
		Revision: rev, Effects: Effects{Events: ch.Events, Leases: ch.Leases, Locks: ch.Locks},
	}
}

func mustMapper(name string) storekeys.Mapper {
	m, err := storekeys.For(name)
	if err != nil {
		panic(err)
	}
	return m
}

// Named stores' records: apply checks their names and quotas.
var storeCreateCommand = Command{
	name: "store_create",
	apply: func(m *Machine, b *pebble.Batch, req *dkvpb.InternalRequest) Result {
		return m.applyStoreCreate(b, req.GetStoreCreate())
	},
}

var storeDeleteCommand = Command{
	name: "store_delete",
	apply: func(m *Machine, b *pebble.Batch, req *dkvpb.InternalRequest) Result {
		return m.applyStoreDelete(b, req.GetStoreDelete())
	},
}
