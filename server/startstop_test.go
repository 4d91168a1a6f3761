package server

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// stopWithin runs s.Stop and fails the test if it has not returned
// within d (a hang detector, not a latency assertion).
func stopWithin(t *testing.T, s *Server, d time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.Stop() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("Stop has not returned after %v", d)
		return nil
	}
}

func busyAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	return lis.Addr().String()
}

func refusedAddr(t *testing.T) string {
	t.Helper()
	// Not on 127.0.0.1, where the node under test binds its own ports
	// to :0: the kernel could hand it this one, just freed, and the
	// node would then try to join itself (seen in CI: no answer within
	// 15s instead of a refused connection).
	lis, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

func quickConfig(dir string) Config {
	return Config{DataDir: dir, ClientAddr: "127.0.0.1:0", PeerAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", TickInterval: 10 * time.Millisecond}
}

func TestStopWithoutStart(t *testing.T) {
	s, err := New(quickConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	if err := stopWithin(t, s, 5*time.Second); err != nil {
		t.Fatalf("Stop without Start: %v", err)
	}
	if err := stopWithin(t, s, 5*time.Second); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := s.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "already stopped") {
		t.Fatalf("Start after Stop: %v, want an 'already stopped' error", err)
	}
}

func TestStopTwiceAfterStart(t *testing.T) {
	s, err := New(quickConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "already started") {
		t.Fatalf("second Start: %v, want an 'already started' error", err)
	}
	if err := stopWithin(t, s, 10*time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := stopWithin(t, s, 5*time.Second); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

// TestStartFailureThenStop fails Start at each step in turn. Each failure
// must name its cause, Stop must then return promptly without error (no
// hang, no panic on a closed store), and everything Start took must be
// released: a fresh server on the same data dir starts.
func TestStartFailureThenStop(t *testing.T) {
	cases := []struct {
		name string
		cfg  func(t *testing.T, dir string) Config
		want string
	}{
		{"peer port in use", func(t *testing.T, dir string) Config {
			c := quickConfig(dir)
			c.PeerAddr = busyAddr(t)
			return c
		}, "peer listener"},
		{"client port in use", func(t *testing.T, dir string) Config {
			c := quickConfig(dir)
			c.ClientAddr = busyAddr(t)
			return c
		}, "client listener"},
		{"http port in use", func(t *testing.T, dir string) Config {
			c := quickConfig(dir)
			c.HTTPAddr = busyAddr(t)
			return c
		}, "http listener"},
		{"data dir is a file", func(t *testing.T, dir string) Config {
			f := filepath.Join(dir, "file")
			if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			return quickConfig(filepath.Join(f, "data"))
		}, "data dir"},
		{"data dir in use", func(t *testing.T, dir string) Config {
			l, err := lockDataDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(l.release)
			return quickConfig(dir)
		}, "is in use by another dkv process (pid"},
		{"join refused", func(t *testing.T, dir string) Config {
			c := quickConfig(dir)
			c.Name, c.Join, c.InitialClusterToken = "joiner", []string{refusedAddr(t)}, "token"
			return c
		}, "connection refused"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := tc.cfg(t, dir)
			s, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err = s.Start(ctx)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start: %v, want an error containing %q", err, tc.want)
			}
			if err := stopWithin(t, s, 5*time.Second); err != nil {
				t.Fatalf("Stop after failed Start: %v", err)
			}
			if err := stopWithin(t, s, 5*time.Second); err != nil {
				t.Fatalf("second Stop after failed Start: %v", err)
			}
			if tc.name == "data dir is a file" || tc.name == "data dir in use" {
				return
			}
			// Nothing of the failed attempt lingers: the data dir can be
			// opened by a working server.
			ok, err := New(quickConfig(cfg.DataDir))
			if err != nil {
				t.Fatal(err)
			}
			if err := ok.Start(ctx); err != nil {
				t.Fatalf("starting on the data dir after the failed start: %v", err)
			}
			select {
			case <-ok.Ready():
			case <-ctx.Done():
				t.Fatal("server on the same data dir not ready")
			}
			if err := stopWithin(t, ok, 10*time.Second); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestStartCancelledJoin: a join that does not answer ends when the
// caller's ctx does (SIGTERM during start-up), and Stop returns.
func TestStartCancelledJoin(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never speaks
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	cfg := quickConfig(t.TempDir())
	cfg.Name, cfg.Join, cfg.InitialClusterToken = "joiner", []string{lis.Addr().String()}, "token"
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Start(ctx) }()
	cancel()
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "context canceled") {
			t.Fatalf("Start: %v, want it cancelled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start ignored its cancelled ctx")
	}
	if err := stopWithin(t, s, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestDataDirInUseNamesPid(t *testing.T) {
	dir := t.TempDir()
	a, err := New(quickConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	b, err := New(quickConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	err = b.Start(context.Background())
	want := "data dir " + dir + " is in use by another dkv process (pid " + strconv.Itoa(os.Getpid()) + ")"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("second server on the data dir: %v, want %q", err, want)
	}
	if err := stopWithin(t, b, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}
