package restore

import (
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/dkv-io/dkv/internal/backup"
	"github.com/dkv-io/dkv/internal/backup/etcdsnap"
	"github.com/dkv-io/dkv/internal/mvcc"
)

// writeTestEtcdSnapshot writes an etcd snapshot of three keys, one of
// them deleted, at revision 5.
func writeTestEtcdSnapshot(t *testing.T, dir string) string {
	t.Helper()
	db, err := pebble.Open("", &pebble.Options{FS: vfs.NewMem(), Logger: quietLog{}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ld, err := mvcc.NewLoader(db)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []mvcc.Version{
		{Key: []byte("a"), Rev: 2, Create: 2, Version: 1, Value: []byte("1")},
		{Key: []byte("b"), Rev: 3, Create: 3, Version: 1, Value: []byte("2")},
		{Key: []byte("c"), Rev: 4, Create: 4, Version: 1, Value: []byte("3")},
		{Key: []byte("b"), Rev: 5, Tombstone: true},
	} {
		if err := ld.Add(&v); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ld.Finish(0); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "etcd.db")
	if _, err := etcdsnap.Write(path, db, etcdsnap.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRestoreEtcd: the data dir holds the snapshot's state at its
// revision, marked as a new cluster's, with the same cluster id for
// every member restored from the same file; a damaged or foreign file
// is refused and leaves the data dir empty, and a non-empty data dir is
// refused.
func TestRestoreEtcd(t *testing.T) {
	dir := t.TempDir()
	path := writeTestEtcdSnapshot(t, dir)
	opts := RestoreOptions{Name: "n1", InitialCluster: "n2=127.0.0.1:2,n1=127.0.0.1:1"}
	var ids []string
	for _, name := range []string{"n1", "n2"} {
		opts.Name, opts.DataDir = name, filepath.Join(dir, "data-"+name)
		info, cid, err := RestoreEtcd(path, opts)
		if err != nil {
			t.Fatal(err)
		}
		if info.Revision != 5 || info.Keys != 2 || info.Versions != 4 {
			t.Fatalf("restore: %+v", info)
		}
		c, err := Inspect(opts.DataDir)
		if err != nil {
			t.Fatal(err)
		}
		if c.Revision != 5 || c.KeyCount != 2 || c.AppliedIndex != 0 {
			t.Fatalf("restored data dir holds %+v, want revision 5, 2 keys, no applied index", c)
		}
		ids = append(ids, cid)
	}
	if ids[0] != ids[1] || ids[0] == "" {
		t.Fatalf("cluster ids %v: want one id for every member restored from one file", ids)
	}
	if _, _, err := RestoreEtcd(path, opts); err == nil {
		t.Fatal("restore into a non-empty data dir was accepted")
	}

	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// As etcdctl snapshot save writes it: the database, its SHA-256.
	sum := sha256.Sum256(b)
	b = append(b, sum[:]...)
	damaged := filepath.Join(dir, "damaged.db")
	b[len(b)/2] ^= 0xff
	os.WriteFile(damaged, b, 0o600)
	for _, tc := range []struct {
		file string
		is   error
	}{
		{writeTestBackup(t, dir), etcdsnap.ErrNotEtcd},
		{damaged, backup.ErrDamaged}, // the CLI's exit code 11
	} {
		opts.DataDir = filepath.Join(dir, "data-bad")
		_, _, err := RestoreEtcd(tc.file, opts)
		if !errors.Is(err, tc.is) {
			t.Fatalf("restore of %s: %v, want %v", tc.file, err, tc.is)
		}
		if ents, _ := os.ReadDir(opts.DataDir); len(ents) != 0 {
			t.Fatalf("a refused restore left %d entries in the data dir", len(ents))
		}
	}
}
