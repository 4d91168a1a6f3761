package tests

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/testutil"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
)

// Opt-in measurements for docs/watch-bench-draft.md. They print numbers
// and assert nothing about timing:
//
//	go test ./tests -run TestWatchBench -v -timeout 20m -args -watch.bench
//	go test ./tests -run TestWatchStalledRSS -v -timeout 20m -args -watch.rss
var (
	watchBench  = flag.Bool("watch.bench", false, "run the watch fan-out measurements")
	watchBenchN = flag.Int("watch.bench.n", 0, "only the fan-out case with this many watchers")
	watchRSS    = flag.Bool("watch.rss", false, "run the stalled-watcher peak RSS measurement (writes ~1 GiB)")
)

// benchWatchers opens n watchers on prefix "b/", perWatchers per stream,
// and returns a function that stops them. Every received event's value
// carries its put's wall-clock send time; its latency goes to lat.
func benchWatchers(t *testing.T, addr string, n, perStream int, lat *latencies) (stop func()) {
	conn := rawConn(t, addr)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for opened := 0; opened < n; {
		k := min(perStream, n-opened)
		st, err := dkvpb.NewWatchClient(conn).Watch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < k; i++ {
			if err := st.Send(&dkvpb.WatchRequest{RequestUnion: &dkvpb.WatchRequest_CreateRequest{CreateRequest: &dkvpb.WatchCreateRequest{Key: []byte("b/"), Prefix: true}}}); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < k; i++ {
			if r, err := st.Recv(); err != nil || !r.Created || r.Canceled {
				t.Fatalf("create: %v %v", r, err)
			}
		}
		opened += k
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				r, err := st.Recv()
				if err != nil {
					return
				}
				now := time.Now().UnixNano()
				for _, e := range r.Events {
					lat.add(now - int64(binary.BigEndian.Uint64(e.Kv.Value)))
				}
			}
		}()
	}
	return func() { cancel(); wg.Wait() }
}

type latencies struct {
	mu      sync.Mutex
	samples []int64
	count   atomic.Int64
}

func (l *latencies) add(ns int64) {
	// Keep every 8th sample: enough for p99 without gigabytes at 10k
	// watchers.
	if l.count.Add(1)%8 == 0 {
		l.mu.Lock()
		l.samples = append(l.samples, ns)
		l.mu.Unlock()
	}
}

func (l *latencies) pct(p float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.samples) == 0 {
		return 0
	}
	sort.Slice(l.samples, func(i, j int) bool { return l.samples[i] < l.samples[j] })
	return time.Duration(l.samples[int(p*float64(len(l.samples)-1))])
}

func benchServer(t *testing.T) *server.Server {
	return servertest.Start(t, servertest.WithClientPort()).Srv
}

func TestWatchBench(t *testing.T) {
	if !*watchBench {
		t.Skip("opt-in: -args -watch.bench")
	}
	for _, tc := range []struct {
		watchers, puts int
		rate           float64 // puts/s; 0 = as fast as 16 writers go
	}{{1, 20000, 0}, {100, 20000, 0}, {10000, 2000, 0}, {10000, 300, 10}} {
		if *watchBenchN != 0 && *watchBenchN != tc.watchers {
			continue
		}
		srv := benchServer(t)
		lat := &latencies{}
		stop := benchWatchers(t, srv.ClientAddr(), tc.watchers, 100, lat)
		kv := dkvpb.NewKVClient(rawConn(t, srv.ClientAddr()))
		want := int64(tc.watchers * tc.puts)
		start := time.Now()
		var next atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := next.Add(1); i <= int64(tc.puts); i = next.Add(1) {
					if tc.rate > 0 {
						time.Sleep(time.Until(start.Add(time.Duration(float64(i) / tc.rate * float64(time.Second)))))
					}
					v := binary.BigEndian.AppendUint64(make([]byte, 0, 64), uint64(time.Now().UnixNano()))
					v = append(v, make([]byte, 56)...)
					if _, err := kv.Put(context.Background(), &dkvpb.PutRequest{Key: []byte(fmt.Sprintf("b/%d", i%1000)), Value: v}); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		putDur := time.Since(start)
		deadline := time.Now().Add(5 * time.Minute)
		for lat.count.Load() < want && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		dur := time.Since(start)
		stop()
		t.Logf("watchers=%d puts=%d rate=%v (%.0f puts/s): delivered %d/%d events in %v = %.0f events/s; put→event latency p50 %v p99 %v; catch-ups %d",
			tc.watchers, tc.puts, tc.rate, float64(tc.puts)/putDur.Seconds(), lat.count.Load(), want, dur.Round(time.Millisecond),
			float64(lat.count.Load())/dur.Seconds(), lat.pct(0.5).Round(10*time.Microsecond), lat.pct(0.99).Round(10*time.Microsecond),
			srv.WatchHub().Stats().CatchUps)
		srv.Stop()
	}

	// Memory per idle watcher: heap growth for 10,000 idle watchers (client
	// and server in this process, 100 watches per stream).
	srv := benchServer(t)
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}
	before := heap()
	stop := benchWatchers(t, srv.ClientAddr(), 10000, 100, &latencies{})
	after := heap()
	t.Logf("idle watchers: 10000 (100 per stream) add %.1f MiB heap = %.0f bytes per watcher (client+server); hub counts %d",
		float64(after-before)/(1<<20), float64(after-before)/10000, srv.WatchHub().Stats().Watchers)
	stop()
	before = heap()
	stop = benchWatchers(t, srv.ClientAddr(), 1000, 1, &latencies{})
	after = heap()
	t.Logf("idle watchers: 1000 on their own streams add %.0f bytes per watcher (client+server)", float64(after-before)/1000)
	stop()
}

// TestWatchStalledRSS runs `dkv serve` as a child process, opens a watch
// that never reads, writes ~1 GiB of values under its prefix and reports
// the server's peak RSS (VmHWM), next to the same load with no watcher.
func TestWatchStalledRSS(t *testing.T) {
	if !*watchRSS {
		t.Skip("opt-in: -args -watch.rss")
	}
	bin := testutil.DKVBinary(t)
	for _, stalled := range []bool{false, true} {
		addr := testutil.FreeAddr(t)
		cmd := exec.Command(bin, "serve", "--data-dir", t.TempDir(), "--client-addr", addr, "--http-addr", "", "--peer-addr", testutil.FreeAddr(t))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		conn := rawConn(t, addr)
		kv := dkvpb.NewKVClient(conn)
		testutil.Eventually(t, 20*time.Second, "dkv serve up", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, err := kv.Range(ctx, &dkvpb.RangeRequest{Key: []byte("x")})
			return err == nil
		})
		ctx, cancel := context.WithCancel(context.Background())
		if stalled {
			st, err := dkvpb.NewWatchClient(conn).Watch(ctx)
			if err != nil {
				t.Fatal(err)
			}
			st.Send(&dkvpb.WatchRequest{RequestUnion: &dkvpb.WatchRequest_CreateRequest{CreateRequest: &dkvpb.WatchCreateRequest{Key: []byte("big/"), Prefix: true, PrevKv: true}}})
			if _, err := st.Recv(); err != nil {
				t.Fatal(err)
			}
			// ... and never Recv again.
		}
		val := make([]byte, 512<<10)
		const total = 1 << 30
		var wg sync.WaitGroup
		var next atomic.Int64
		start := time.Now()
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := next.Add(1); i <= total/int64(len(val)); i = next.Add(1) {
					if _, err := kv.Put(context.Background(), &dkvpb.PutRequest{Key: []byte(fmt.Sprintf("big/%d", i%64)), Value: val}); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		hwm := vmHWM(t, cmd.Process.Pid)
		t.Logf("stalled watcher=%v: wrote 1 GiB (512 KiB values, prev_kv on) in %v; server peak RSS %d MiB",
			stalled, time.Since(start).Round(time.Millisecond), hwm>>10)
		cancel()
		cmd.Process.Kill()
		cmd.Wait()
	}
}

// vmHWM is a process's peak resident set size in KiB.
func vmHWM(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			f := strings.Fields(l)
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v
		}
	}
	return 0
}
