package state

import (
	"bytes"
	"strconv"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/keyrange"
	"github.com/dkv-io/dkv/internal/keys"
	"github.com/dkv-io/dkv/internal/mvcc"
	"github.com/dkv-io/dkv/internal/storage"
	"google.golang.org/protobuf/proto"
)

// TestStorageLayoutWaitsForEveryMember: the layout change is refused,
// changing nothing, while a member of the table has published no version
// or one older than ValueOnceSince; once every member reads layout 3 it
// drops the latest records, records format 3 in the same batch, and the
// keyspace reads the same as before. Applying it again changes nothing.
func TestStorageLayoutWaitsForEveryMember(t *testing.T) {
	h := newHarness(t)
	setMember := h.setMemberVersion
	upgrade := func() Result {
		return h.one(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_StorageLayout{
			StorageLayout: &dkvpb.StorageLayoutRequest{Layout: mvcc.LayoutValueOnce}}})
	}
	latestRecords := func() int {
		it, err := h.store.DB().NewIter(&pebble.IterOptions{LowerBound: keys.MVCCLatestPrefix, UpperBound: keyrange.PrefixEnd(keys.MVCCLatestPrefix)})
		if err != nil {
			t.Fatal(err)
		}
		defer it.Close()
		n := 0
		for it.First(); it.Valid(); it.Next() {
			n++
		}
		return n
	}
	read := func() []byte {
		resp, err := h.m.kv.Range(h.store.DB(), &dkvpb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := proto.Marshal(resp)
		return b
	}
	for i, k := range []string{"a", "b", "c", "b"} {
		h.ok(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Put{Put: &dkvpb.PutRequest{Key: []byte(k), Value: []byte{byte(i)}}}})
	}
	h.ok(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_DeleteRange{DeleteRange: &dkvpb.DeleteRangeRequest{Key: []byte("c")}}})
	before := read()
	if h.m.kv.Layout() != mvcc.LayoutLatestAndHistory || latestRecords() != 2 {
		t.Fatalf("a new store: layout %d with %d latest records, want layout %d with 2", h.m.kv.Layout(), latestRecords(), mvcc.LayoutLatestAndHistory)
	}

	setMember(1, "0.3.0")
	for _, v := range []string{"", "0.2.9", "banana"} {
		setMember(2, v)
		res := upgrade()
		if dkverr.CodeOf(res.Err) != dkverr.Unavailable || !bytes.Contains([]byte(res.Err.Error()), []byte("m2")) {
			t.Fatalf("a member at version %q: the layout change gave %v, want Unavailable naming member m2", v, res.Err)
		}
		if h.m.kv.Layout() != mvcc.LayoutLatestAndHistory || latestRecords() != 2 {
			t.Fatalf("a refused layout change changed the store: layout %d, %d latest records", h.m.kv.Layout(), latestRecords())
		}
	}

	setMember(2, "0.3.1")
	if res := upgrade(); res.Err != nil {
		t.Fatalf("every member at 0.3: %v", res.Err)
	}
	if h.m.kv.Layout() != mvcc.LayoutValueOnce || latestRecords() != 0 {
		t.Fatalf("after the layout change: layout %d with %d latest records, want layout %d with none", h.m.kv.Layout(), latestRecords(), mvcc.LayoutValueOnce)
	}
	if v, _, err := h.store.Meta("format"); err != nil || string(v) != strconv.Itoa(storage.FormatValueOnce) {
		t.Fatalf("format record after the layout change: %q %v, want %d", v, err, storage.FormatValueOnce)
	}
	if after := read(); !bytes.Equal(before, after) {
		t.Fatalf("the keyspace reads differently after the layout change")
	}
	if res := upgrade(); res.Err != nil || h.m.kv.Layout() != mvcc.LayoutValueOnce {
		t.Fatalf("the layout change applied again: %v, layout %d", res.Err, h.m.kv.Layout())
	}
	// Writes in layout 3 add no latest record, and read back.
	h.ok(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Put{Put: &dkvpb.PutRequest{Key: []byte("d"), Value: []byte("x")}}})
	if n := latestRecords(); n != 0 {
		t.Fatalf("a put in layout 3 wrote %d latest records", n)
	}
	resp, err := h.m.kv.Range(h.store.DB(), &dkvpb.RangeRequest{Key: []byte("d")})
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "x" {
		t.Fatalf("get d in layout 3: %v %v", resp, err)
	}
}

// setMemberVersion writes member id (named m<id>) with version into the
// member table directly, as if it had published it.
func (h *harness) setMemberVersion(id uint64, version string) {
	h.t.Helper()
	b := h.store.DB().NewBatch()
	defer b.Close()
	data, err := proto.Marshal(&dkvpb.Member{Id: id, Name: "m" + strconv.FormatUint(id, 10), Version: version})
	if err != nil {
		h.t.Fatal(err)
	}
	if err := setMember(b, id, data); err != nil {
		h.t.Fatal(err)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		h.t.Fatal(err)
	}
}
