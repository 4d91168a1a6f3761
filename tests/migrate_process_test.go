package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
)

// TestProcessFormat1DataDirMigrates starts today's binary on a data dir
// written by the last build of storage format 1 (testdata/format1-datadir:
// a single node that put fixture/key1..12, overwrote key3 and deleted
// key12, then stopped with SIGTERM, so its raft log is in Pebble's WAL).
// It must migrate it in place, saying so, keep every key, keep a backup of
// the old layout, accept writes, and after kill -9 restart without
// migrating again and with every acknowledged write.
func TestProcessFormat1DataDirMigrates(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n := newDamageNode(t)
	n.Name = "default" // the fixture's member name
	for i, a := range n.Args {
		if a == "--name" {
			n.Args[i+1] = n.Name
		}
	}
	copyDir(t, filepath.Join("testdata", "format1-datadir"), n.Dir)
	if err := os.Chmod(filepath.Join(n.Dir, "peer-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	n.start()
	if !n.waitReadyOrExit(60 * time.Second) {
		t.Fatalf("node exited on a format-1 data dir:\n%s", n.output())
	}
	for _, want := range []string{"migrating the data dir from storage format 1 to 2", "migrated the data dir to storage format 2", "entries=31"} {
		if !strings.Contains(n.output(), want) {
			t.Errorf("output lacks %q:\n%s", want, n.output())
		}
	}
	for _, p := range []string{"raftlog", "format1-backup"} {
		if fi, err := os.Stat(filepath.Join(n.Dir, p)); err != nil || !fi.IsDir() {
			t.Errorf("no %s/ in the data dir after the migration: %v", p, err)
		}
	}
	want := map[string]string{}
	for i := 1; i <= 11; i++ {
		want[fmt.Sprintf("fixture/key%d", i)] = fmt.Sprintf("value %d", i)
	}
	want["fixture/key3"] = "value 3 v2"
	checkKeys := func(stage string) {
		t.Helper()
		c := n.dial(ctx)
		defer c.Close()
		res, err := c.Range(ctx, "fixture/", client.WithPrefix())
		if err != nil {
			t.Fatalf("%s: %v", stage, err)
		}
		got := map[string]string{}
		for _, kv := range res.KVs {
			got[string(kv.Key)] = string(kv.Value)
		}
		if len(got) != len(want) {
			t.Errorf("%s: %d keys, want %d: %v", stage, len(got), len(want), got)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %s = %q, want %q", stage, k, got[k], v)
			}
		}
	}
	checkKeys("after the migration")
	c := n.dial(ctx)
	for i := 0; i < 50; i++ {
		k := fmt.Sprintf("fixture/new%02d", i)
		if _, err := c.Put(ctx, k, []byte("after")); err != nil {
			t.Fatal(err)
		}
		want[k] = "after"
	}
	c.Close()
	n.stop(syscall.SIGKILL)
	n.start()
	if !n.waitReadyOrExit(60 * time.Second) {
		t.Fatalf("restart after the migration and kill -9 exited:\n%s", n.output())
	}
	if strings.Contains(n.output(), "migrating") {
		t.Errorf("the restart migrated again:\n%s", n.output())
	}
	checkKeys("after kill -9 and a restart")
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
