package etcdsnap

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/dkv-io/dkv/internal/backup"
	"github.com/dkv-io/dkv/internal/lease"
	"github.com/dkv-io/dkv/internal/mvcc"
	"github.com/dkv-io/dkv/internal/storekeys"
	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

func memDB(t *testing.T) *pebble.DB {
	t.Helper()
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem(), Logger: quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// quiet drops Pebble's informational messages.
type quiet struct{}

func (quiet) Infof(string, ...any)           {}
func (quiet) Errorf(format string, a ...any) { pebble.DefaultLogger.Errorf(format, a...) }
func (quiet) Fatalf(format string, a ...any) { pebble.DefaultLogger.Fatalf(format, a...) }

// source loads a history into a store: keys created in txns, overwritten,
// deleted and created again, leases, a compaction at 6.
func source(t *testing.T) *pebble.DB {
	t.Helper()
	db := memDB(t)
	ld, err := mvcc.NewLoader(db)
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range []lease.Record{{ID: 7, TTLMs: 60_000, RemainingMs: 60_000, Epoch: 1}, {ID: 9, TTLMs: 3_000, RemainingMs: 1_500, Epoch: 1}} {
		if err := ld.Lease(rec); err != nil {
			t.Fatal(err)
		}
	}
	vs := []mvcc.Version{
		{Key: []byte("a"), Rev: 2, Create: 2, Version: 1, Value: []byte("a1")},
		{Key: []byte("b"), Rev: 2, Sub: 1, Create: 2, Version: 1, Value: []byte("b1"), Lease: 7},
		{Key: []byte("c"), Rev: 3, Create: 3, Version: 1, Value: []byte("c1")},
		{Key: []byte("a"), Rev: 4, Create: 2, Version: 2, Value: []byte("a2")},
		{Key: []byte("c"), Rev: 5, Tombstone: true},
		{Key: []byte("d\x00z"), Rev: 6, Create: 6, Version: 1, Value: []byte{}, Lease: 9},
		{Key: []byte("a"), Rev: 7, Create: 2, Version: 3, Value: []byte("a3")},
		{Key: []byte("c"), Rev: 8, Create: 8, Version: 1, Value: []byte("c2")},
		{Key: []byte("b"), Rev: 8, Sub: 1, Tombstone: true},
		{Key: []byte("e"), Rev: 9, Create: 9, Version: 1, Value: bytes.Repeat([]byte("v"), 5000), Lease: 404},
		// A named store's key: not an etcd client's, left out.
		{Key: []byte(storekeys.Reserved + "b/x"), Rev: 9, Sub: 1, Create: 9, Version: 1, Value: []byte("b")},
	}
	for i := range vs {
		if err := ld.Add(&vs[i]); err != nil {
			t.Fatal(err)
		}
	}
	res, err := ld.Finish(6)
	if err != nil {
		t.Fatal(err)
	}
	if res.Revision != 9 || res.Keys != 5 || res.Unleased != 1 {
		t.Fatalf("load: %+v, want revision 9, 5 keys, 1 unleased", res)
	}
	return db
}

// exported is Export's output for the default store's keys, printed.
func exported(t *testing.T, r pebble.Reader) string {
	t.Helper()
	var b strings.Builder
	err := mvcc.Export(r, []byte(storekeys.Reserved), func(v *mvcc.Version) error {
		fmt.Fprintf(&b, "%d.%d %q tomb=%v c=%d v=%d l=%d %d bytes %.8q\n", v.Rev, v.Sub, v.Key, v.Tombstone, v.Create, v.Version, v.Lease, len(v.Value), v.Value)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// withSum appends etcd's SHA-256 to the database at path, as
// Maintenance.Snapshot's stream and etcdctl snapshot save do.
func withSum(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	if err := os.WriteFile(path, append(b, sum[:]...), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestWriteImport: a state written as an etcd snapshot and imported
// again exports the same versions (the live keys at the compact
// revision, then every change after it, with their sub-revisions), the
// same counters and leases, and keys attached to their leases.
func TestWriteImport(t *testing.T) {
	src := source(t)
	want := exported(t, src)
	// The base versions (live at the compact revision) are numbered in
	// key order within their revision; b was 2.1.
	wantLines := "4.0 \"a\" tomb=false c=2 v=2 l=0 2 bytes \"a2\"\n"
	if !strings.HasPrefix(want, "2.0 \"b\"") || !strings.Contains(want, wantLines) || strings.Contains(want, "\"c1\"") || !strings.Contains(want, "8.1 \"b\" tomb=true") {
		t.Fatalf("export from the compact revision 6:\n%s", want)
	}
	path := filepath.Join(t.TempDir(), "snap.db")
	info, err := Write(path, src, WriteOptions{ConsistentIndex: 42, Term: 3})
	if err != nil {
		t.Fatal(err)
	}
	if info.Revision != 9 || info.CompactRevision != 6 || info.Leases != 2 || info.Versions != 7 || info.Keys != 4 {
		t.Fatalf("write: %+v", info)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size()%512 != 0 {
		t.Fatalf("written file: %v %v: want a whole number of 512-byte blocks", fi, err)
	}
	for _, sum := range []bool{false, true} {
		if sum {
			withSum(t, path)
		}
		dst := memDB(t)
		in, err := Import(path, dst)
		if err != nil {
			t.Fatal(err)
		}
		if in.Checksum != sum || in.Revision != 9 || in.CompactRevision != 6 || in.Leases != 2 || in.Keys != 4 || in.Unleased != 1 {
			t.Fatalf("import (checksum %v): %+v", sum, in)
		}
		if got := exported(t, dst); got != want {
			t.Fatalf("imported:\n%s\nwant:\n%s", got, want)
		}
		var ls []string
		if err := lease.List(dst, func(r lease.Record) bool {
			var keys []string
			lease.Keys(dst, r.ID, func(k []byte) bool { keys = append(keys, string(k)); return true })
			ls = append(ls, fmt.Sprintf("%d ttl=%d rem=%d keys=%q", r.ID, r.TTLMs, r.RemainingMs, keys))
			return true
		}); err != nil {
			t.Fatal(err)
		}
		// b left lease 7 when it was deleted; lease 9's remaining TTL
		// travels in whole seconds.
		if got, want := strings.Join(ls, "; "), `7 ttl=60000 rem=60000 keys=[]; 9 ttl=3000 rem=2000 keys=["d\x00z"]`; got != want {
			t.Fatalf("leases: %s, want %s", got, want)
		}
	}
}

// TestImportRefuses: what is not an etcd snapshot, or is a damaged one,
// is refused with an error that says so, and nothing is loaded.
func TestImportRefuses(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.db")
	if _, err := Write(good, source(t), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	withSum(t, good)
	goodBytes, _ := os.ReadFile(good)

	noKeyBucket := filepath.Join(dir, "other.db")
	bdb, err := bolt.Open(noKeyBucket, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	bdb.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("things")); return err })
	bdb.Close()

	// A file with a key in the named stores' key space.
	reservedKey := filepath.Join(dir, "reserved.db")
	if _, err := Write(reservedKey, source(t), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	bdb, err = bolt.Open(reservedKey, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := bdb.Update(func(tx *bolt.Tx) error {
		v, err := proto.Marshal(&mvccpb.KeyValue{Key: []byte(storekeys.Reserved + "x"), Value: []byte("1"), CreateRevision: 10, ModRevision: 10, Version: 1})
		if err != nil {
			return err
		}
		return tx.Bucket(bucketKey).Put(appendRev(nil, 10, 0), v)
	}); err != nil {
		t.Fatal(err)
	}
	bdb.Close()

	flipped := bytes.Clone(goodBytes)
	flipped[5000] ^= 1
	badSum := bytes.Clone(goodBytes)
	badSum[len(badSum)-1] ^= 1

	for _, tc := range []struct {
		name    string
		data    []byte
		path    string
		is      error
		message string
	}{
		{name: "text", data: []byte(strings.Repeat("hello etcd\n", 100)), is: ErrNotEtcd, message: "neither a bbolt database"},
		{name: "zero pages", data: make([]byte, 8192), is: ErrNotEtcd, message: "bbolt cannot open it"},
		{name: "dkv backup", data: append([]byte("DKVSNAP1"), make([]byte, 600)...), is: ErrNotEtcd, message: "it is a DKV backup"},
		{name: "empty", data: []byte{}, is: ErrNotEtcd, message: "too short"},
		{name: "cut", data: goodBytes[:len(goodBytes)-100], is: ErrNotEtcd, message: "cut off"},
		{name: "content changed", data: flipped, is: ErrDamaged, message: "checksum mismatch"},
		{name: "checksum changed", data: badSum, is: ErrDamaged, message: "checksum mismatch"},
		{name: "bolt without etcd's buckets", path: noKeyBucket, is: ErrNotEtcd, message: `without etcd's "key" and "meta" buckets`},
		{name: "a named store's key", path: reservedKey, message: "reserves for its named stores"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path
			if path == "" {
				path = filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
				if err := os.WriteFile(path, tc.data, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			db := memDB(t)
			_, err := Import(path, db)
			if err == nil || tc.is != nil && !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.message) || !strings.Contains(err.Error(), path) {
				t.Fatalf("import: %v; want %v naming the file and saying %q", err, tc.is, tc.message)
			}
			if errors.Is(err, ErrDamaged) != errors.Is(err, backup.ErrDamaged) {
				t.Fatalf("%v: ErrDamaged must also be backup.ErrDamaged (the CLI's exit code)", err)
			}
			if got := exported(t, db); got != "" && tc.is != nil {
				t.Fatalf("a refused file loaded:\n%s", got)
			}
		})
	}
}
