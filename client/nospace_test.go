package client_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/internal/storage"
	"github.com/dkv-io/dkv/internal/testutil"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/embed"
)

// openSpaceTest opens an embedded node whose filesystem reports and fails
// as fs says, measuring space every 20ms.
func openSpaceTest(t *testing.T, dir string, fs *storage.FaultFS, edit func(*server.Config)) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := embed.Open(ctx, dir, embed.WithServerConfig(func(cfg *server.Config) {
		cfg.TickInterval = 10 * time.Millisecond
		cfg.FS = fs
		cfg.SpaceCheckInterval = 20 * time.Millisecond
		cfg.SpaceReserveBytes = 64 << 20
		cfg.BallastBytes = 1 << 20
		cfg.NoSync = false
		if edit != nil {
			edit(cfg)
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func checkAcked(t *testing.T, c *client.Client, acked map[string]string) {
	t.Helper()
	ctx := context.Background()
	for k, v := range acked {
		kv, err := c.Get(ctx, k)
		if err != nil {
			t.Fatalf("acknowledged key %q: %v", k, err)
		}
		if string(kv.Value) != v {
			t.Fatalf("acknowledged key %q = %q, want %q", k, kv.Value, v)
		}
	}
}

// A disk whose free space falls below the reserve: writes are refused with
// ErrNoSpace (the CLI's exit 10), reads and deletes work, and writes
// resume by themselves once space is back, with nothing acknowledged lost.
func TestNoSpaceWhenDiskNearlyFull(t *testing.T) {
	fs := storage.NewFaultFS(nil)
	fs.Avail.Store(1 << 40)
	c := openSpaceTest(t, t.TempDir(), fs, func(cfg *server.Config) { cfg.HTTPAddr = "127.0.0.1:0" })
	defer c.Close()
	ctx := context.Background()
	acked := map[string]string{}
	for i := range 20 {
		k, v := fmt.Sprintf("k%02d", i), fmt.Sprintf("v%d", i)
		if _, err := c.Put(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
		acked[k] = v
	}

	fs.Avail.Store(10 << 20) // below the 64 MiB reserve
	var refused error
	testutil.EventuallyNoError(t, 10*time.Second, "put refused once the disk is nearly full", func(context.Context) error {
		_, err := c.Put(ctx, "late", []byte("x"))
		if err == nil {
			acked["late"] = "x"
			return errors.New("put still accepted")
		}
		refused = err
		if !errors.Is(err, client.ErrNoSpace) {
			t.Fatalf("put on a nearly full disk: %v, want ErrNoSpace", err)
		}
		return nil
	})
	if !strings.Contains(refused.Error(), "reserve") {
		t.Errorf("NoSpace message %q does not say why", refused)
	}
	// Over HTTP: 507 Insufficient Storage, not 429 (retry later).
	resp, err := http.Post("http://"+embed.Server(c).HTTPAddr()+"/v1/kv/put", "application/json",
		strings.NewReader(`{"key":"aHR0cA==","value":"eA=="}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInsufficientStorage || !strings.Contains(string(body), "reserve") {
		t.Errorf("HTTP put on a nearly full disk: %d %s, want 507 naming the reserve", resp.StatusCode, body)
	}
	// Every kind of data-adding write is refused; a txn of deletes is not.
	if _, err := c.Counter(ctx, "ctr", 1); !errors.Is(err, client.ErrNoSpace) {
		t.Errorf("counter: %v, want ErrNoSpace", err)
	}
	if _, err := c.Grant(ctx, 10*time.Second); !errors.Is(err, client.ErrNoSpace) {
		t.Errorf("lease grant: %v, want ErrNoSpace", err)
	}
	checkAcked(t, c, acked) // reads still work
	if _, err := c.Delete(ctx, "k00"); err != nil {
		t.Fatalf("delete while out of space: %v", err)
	}
	delete(acked, "k00")
	if err := c.Compact(ctx, 1); err != nil {
		t.Fatalf("compact while out of space: %v", err)
	}

	fs.Avail.Store(1 << 40)
	testutil.EventuallyNoError(t, 10*time.Second, "writes resume once space is freed", func(context.Context) error {
		_, err := c.Put(ctx, "after", []byte("y"))
		return err
	})
	acked["after"] = "y"
	checkAcked(t, c, acked)
}

// --quota-bytes: over it writes are refused, reads work, deleting and
// compacting brings the database back under and writes resume.
func TestQuotaAlarm(t *testing.T) {
	fs := storage.NewFaultFS(nil)
	fs.Avail.Store(1 << 40)
	const quota = 16 << 20
	c := openSpaceTest(t, t.TempDir(), fs, func(cfg *server.Config) { cfg.QuotaBytes = quota })
	defer c.Close()
	ctx := context.Background()
	acked := map[string]string{}
	var err error
	deadline := time.Now().Add(60 * time.Second)
	raw := make([]byte, 256<<10)
	for i := 0; time.Now().Before(deadline); i++ {
		k := fmt.Sprintf("big/%04d", i)
		// Incompressible: the tables are compressed, and the quota is
		// about the data they hold. (Base64 text, a quarter smaller once
		// compressed, let a memtable flush shrink the database back under
		// the quota between the refusal and the next put.)
		rand.Read(raw)
		val := string(raw)
		if _, err = c.Put(ctx, k, raw); err != nil {
			break
		}
		acked[k] = val
	}
	if !errors.Is(err, client.ErrNoSpace) {
		t.Fatalf("writing past the quota: %v, want ErrNoSpace", err)
	}
	if !strings.Contains(err.Error(), "quota") {
		t.Errorf("NoSpace message %q does not name the quota", err)
	}
	if len(acked) == 0 || len(acked) > 64 {
		t.Fatalf("%d values of 256 KiB accepted under a 16 MiB quota", len(acked))
	}
	checkAcked(t, c, acked)
	if _, err := c.Put(ctx, "small", []byte("s")); !errors.Is(err, client.ErrNoSpace) {
		t.Fatalf("small put over quota: %v, want ErrNoSpace", err)
	}

	d, err := c.Delete(ctx, "big/", client.WithPrefix())
	if err != nil {
		t.Fatalf("delete over quota: %v", err)
	}
	if err := c.Compact(ctx, d.Revision); err != nil {
		t.Fatalf("compact over quota: %v", err)
	}
	testutil.EventuallyNoError(t, 20*time.Second, "writes resume after delete and compact", func(context.Context) error {
		_, err := c.Put(ctx, "after", []byte("ok"))
		return err
	})
	kv, err := c.Get(ctx, "after")
	if err != nil || string(kv.Value) != "ok" {
		t.Fatalf("after resume: %v %v", kv, err)
	}
}

// A write that meets ENOSPC (the disk filled up behind the reserve's back)
// releases the ballast and is retried: no failure, no panic, the alarm
// stops writes until space is measured again, and the ballast comes back.
func TestENOSPCReleasesBallast(t *testing.T) {
	fs := storage.NewFaultFS(nil)
	fs.Avail.Store(1 << 40)
	dir := t.TempDir()
	c := openSpaceTest(t, dir, fs, nil)
	defer c.Close()
	ctx := context.Background()
	ballast := filepath.Join(dir, storage.BallastName)
	var before os.FileInfo
	testutil.EventuallyNoError(t, 5*time.Second, "ballast created", func(context.Context) (err error) { before, err = os.Stat(ballast); return err })

	acked := map[string]string{}
	fs.FailNext.Store(1)
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; time.Now().Before(deadline) && fs.FailNext.Load() > 0; i++ {
		k := fmt.Sprintf("e%03d", i)
		if _, err := c.Put(ctx, k, []byte(k)); err == nil {
			acked[k] = k
		} else if !errors.Is(err, client.ErrNoSpace) {
			t.Fatalf("put around ENOSPC: %v", err)
		}
	}
	if fs.FailNext.Load() > 0 {
		t.Fatal("no write reached the filesystem")
	}
	select {
	case <-embed.Server(c).Failed():
		t.Fatalf("node failed: %v", embed.Server(c).Err())
	default:
	}
	testutil.EventuallyNoError(t, 10*time.Second, "writes resume after ENOSPC", func(context.Context) error {
		_, err := c.Put(ctx, "after", []byte("after"))
		return err
	})
	acked["after"] = "after"
	testutil.EventuallyNoError(t, 5*time.Second, "ballast released and restored", func(context.Context) error {
		after, err := os.Stat(ballast)
		// (A new file may get the old one's inode number back.)
		if err == nil && os.SameFile(before, after) && after.ModTime().Equal(before.ModTime()) {
			return errors.New("the ballast is the one from before the ENOSPC")
		}
		return err
	})
	checkAcked(t, c, acked)
}

// A disk that stays full: Pebble cannot go on. The node must not panic
// (today it did: "fatal commit error ... no space left on device"); it
// reports the failure, stops within seconds, and every acknowledged write
// is in what it left on disk.
func TestDiskStaysFullStopsCleanly(t *testing.T) {
	fs := storage.NewFaultFS(nil)
	fs.Avail.Store(1 << 40)
	dir := t.TempDir()
	c := openSpaceTest(t, dir, fs, func(cfg *server.Config) {
		cfg.BallastBytes = -1
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	srv := embed.Server(c)
	ctx := context.Background()
	acked := map[string]string{}
	for i := range 20 {
		k := fmt.Sprintf("s%02d", i)
		if _, err := c.Put(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
		acked[k] = k
	}
	fs.Full.Store(true)
writes:
	for i := 0; i < 5; i++ {
		select {
		case <-srv.Failed():
			// The failure is what the writes were for: the rest would
			// only wait out their timeouts on a stopped node.
			break writes
		default:
		}
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		c.Put(pctx, fmt.Sprintf("x%d", i), []byte("x")) // outcome unknown: not acked
		cancel()
	}
	select {
	case <-srv.Failed():
	case <-time.After(10 * time.Second):
		t.Fatal("node did not report the storage failure")
	}
	if err := srv.Err(); !errors.Is(err, storage.ErrDiskFull) {
		t.Errorf("FailErr = %v, want ErrDiskFull", err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- srv.Stop() }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop hangs after a storage failure")
	}
	c.Close()

	// The failed database cannot be closed in this process (its goroutine
	// is parked); open a copy of its files, as a restart would.
	cp := t.TempDir()
	copyFiles(t, dir, cp)
	copyFiles(t, filepath.Join(dir, "raftlog"), filepath.Join(cp, "raftlog"))
	fs2 := storage.NewFaultFS(nil)
	fs2.Avail.Store(1 << 40)
	// Let the abandoned database's background work succeed and go quiet
	// for the rest of the package's tests.
	fs.Full.Store(false)
	c2 := openSpaceTest(t, cp, fs2, nil)
	defer c2.Close()
	checkAcked(t, c2, acked)
}

// A node started on a disk with room to open but less free space than the
// reserve starts read-only: it serves reads and refuses writes with
// ErrNoSpace until space is freed, without a restart.
func TestStartsReadOnlyOnNearlyFullDisk(t *testing.T) {
	dir := t.TempDir()
	fs := storage.NewFaultFS(nil)
	fs.Avail.Store(1 << 40)
	c := openSpaceTest(t, dir, fs, nil)
	ctx := context.Background()
	if _, err := c.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	c.Close()

	fs.Avail.Store(10 << 20) // room to open (4 MiB), below the 64 MiB reserve
	c = openSpaceTest(t, dir, fs, nil)
	defer c.Close()
	kv, err := c.Get(ctx, "k")
	if err != nil || string(kv.Value) != "v" {
		t.Fatalf("read on a nearly full disk: %v %v", kv, err)
	}
	testutil.EventuallyNoError(t, 10*time.Second, "writes refused on a nearly full disk", func(context.Context) error {
		_, err := c.Put(ctx, "k2", []byte("v2"))
		if errors.Is(err, client.ErrNoSpace) {
			return nil
		}
		if err == nil {
			t.Fatal("write accepted on a disk below the reserve")
		}
		return err
	})
	fs.Avail.Store(1 << 40)
	testutil.EventuallyNoError(t, 10*time.Second, "writes resume", func(context.Context) error {
		_, err := c.Put(ctx, "k2", []byte("v2"))
		return err
	})
}

// copyFiles copies the files (not the directories, nor Pebble's LOCK) of
// dir into to.
func copyFiles(t *testing.T, dir, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() || e.Name() == "LOCK" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
