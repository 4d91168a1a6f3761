package lease

import (
	"bytes"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestRecordOwner: a lease record keeps the user who granted it across a
// write and a read; a record without owner is written in the format of
// versions before owners, and such a record reads back ownerless.
func TestRecordOwner(t *testing.T) {
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b := db.NewBatch()
	recs := []Record{
		{ID: 1, TTLMs: 5000, RemainingMs: 4000, Epoch: 3, Owner: "alice"},
		{ID: 2, TTLMs: 5000, RemainingMs: 5000, Epoch: 1, Auto: true, Owner: "bob"},
		{ID: 3, TTLMs: 5000, RemainingMs: 5000, Epoch: 1},
	}
	for i := range recs {
		if err := Set(b, &recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	for _, want := range recs {
		got, ok, err := Get(db, want.ID)
		if err != nil || !ok || got != want {
			t.Errorf("lease %d reads back %+v (%v, %v), want %+v", want.ID, got, ok, err, want)
		}
	}
	var listed []Record
	if err := List(db, func(r Record) bool { listed = append(listed, r); return true }); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 3 || listed[0].Owner != "alice" || listed[1].Owner != "bob" || listed[2].Owner != "" {
		t.Errorf("List = %+v, want owners alice, bob, none", listed)
	}
	// The pre-owner format: three uvarints and a flags byte.
	old := []byte{0x88, 0x27, 0x88, 0x27, 0x01, 0x00}
	if enc := encode(&recs[2]); !bytes.Equal(enc, old) {
		t.Errorf("an ownerless record encodes as %x, want the old format %x", enc, old)
	}
	if r, err := decode(9, old); err != nil || r.Owner != "" || r.TTLMs != 5000 {
		t.Errorf("old-format record decodes as %+v, %v", r, err)
	}
	for _, bad := range [][]byte{
		{0x88, 0x27, 0x88, 0x27, 0x01, 0x02},      // owner flag, no owner
		{0x88, 0x27, 0x88, 0x27, 0x01, 0x00, 'x'}, // owner, no flag
		{0x88, 0x27, 0x88, 0x27, 0x01, 0x04},      // unknown flag
	} {
		if _, err := decode(9, bad); err == nil {
			t.Errorf("decode(%x) accepted a corrupt record", bad)
		}
	}
	for _, c := range []struct {
		user  string
		root  bool
		owner string
		want  bool
	}{
		{"", false, "alice", true}, // auth disabled or a member's own command
		{"alice", false, "alice", true},
		{"bob", false, "alice", false},
		{"root", true, "alice", true},
		{"alice", false, "", false}, // granted before auth was enabled
		{"root", true, "", true},
	} {
		if got := MayUse(c.user, c.root, c.owner); got != c.want {
			t.Errorf("MayUse(%q, root=%v, owner %q) = %v, want %v", c.user, c.root, c.owner, got, c.want)
		}
	}
}
