package server

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/storage"
	"github.com/dkv-io/dkv/internal/testutil"
	"google.golang.org/grpc"
)

// TestNoSpaceAlarmBeforeReadyOnFullDisk: a node
// restarted on a disk that is full but for its ballast releases the
// ballast to open. The space the ballast held looks free, but it is the
// reserve: the node must have the NOSPACE alarm in force when it reports
// ready, refuse a put made right then, and keep refusing until there is
// room to put the ballast back; then the alarm clears and writes resume.
func TestNoSpaceAlarmBeforeReadyOnFullDisk(t *testing.T) {
	const (
		ballast = 16 << 20
		reserve = 8 << 20
		full    = 1 << 20 // free with the ballast in place: too little to open (4 MiB)
	)
	dir := t.TempDir()
	ffs := storage.NewFaultFS(nil)
	// The disk: "full" free while the ballast exists, the ballast's
	// size more once it is gone; or roomy.
	var roomy atomic.Bool
	roomy.Store(true)
	ffs.Usage = func(_ string, du vfs.DiskUsage) vfs.DiskUsage {
		switch _, err := os.Stat(filepath.Join(dir, storage.BallastName)); {
		case roomy.Load():
			du.AvailBytes = 1 << 40
		case errors.Is(err, fs.ErrNotExist):
			du.AvailBytes = full + ballast
		default:
			du.AvailBytes = full
		}
		du.TotalBytes = max(du.TotalBytes, du.AvailBytes)
		return du
	}
	cfg := func() Config {
		return Config{DataDir: dir, ClientAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", TickInterval: 10 * time.Millisecond,
			FS: ffs, BallastBytes: ballast, SpaceReserveBytes: reserve, SpaceCheckInterval: 20 * time.Millisecond}
	}
	start := func() (*Server, *grpc.ClientConn) {
		t.Helper()
		s, err := New(cfg())
		if err != nil {
			t.Fatal(err)
		}
		return s, startInProcess(t, s)
	}
	ballastThere := func() bool {
		_, err := os.Stat(filepath.Join(dir, storage.BallastName))
		return err == nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	s, conn := start()
	if _, err := dkvpb.NewKVClient(conn).Put(ctx, &dkvpb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the ballast file is created", ballastThere)
	conn.Close()
	s.Stop()

	// The disk fills up while the node is down.
	roomy.Store(false)
	s, conn = start()
	// The moment it is ready: the alarm is in force, /readyz agrees, and
	// a put is refused.
	if !s.sm.Alarms().Raised(s.memberID) {
		t.Errorf("ready on a full disk (ballast released to open) without the NOSPACE alarm: alarms %q", s.sm.Alarms().Describe())
	}
	kv := dkvpb.NewKVClient(conn)
	if _, err := kv.Put(ctx, &dkvpb.PutRequest{Key: []byte("k2"), Value: []byte("v2")}); dkverr.CodeOf(err) != dkverr.NoSpace {
		t.Fatalf("put right after ready on a full disk: %v, want NoSpace", err)
	}
	if r, err := kv.Range(ctx, &dkvpb.RangeRequest{Key: []byte("k")}); err != nil || len(r.Kvs) != 1 {
		t.Fatalf("read on a full disk: %v %v", r, err)
	}
	resp, err := http.Get("http://" + s.HTTPAddr() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz after Ready: %d", resp.StatusCode)
	}
	if ballastThere() {
		t.Fatal("the ballast is back on a full disk")
	}

	// Room again: the alarm clears, the ballast is back, writes resume.
	roomy.Store(true)
	testutil.Eventually(t, 30*time.Second, "writes resume once there is room", func() bool {
		_, err := kv.Put(ctx, &dkvpb.PutRequest{Key: []byte("k2"), Value: []byte("v2")})
		return err == nil
	})
	testutil.Eventually(t, 30*time.Second, "the ballast is restored", ballastThere)
	if s.sm.Alarms().Raised(s.memberID) {
		t.Fatal("the alarm is still raised after writes resumed")
	}
}
