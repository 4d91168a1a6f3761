package tests

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/internal/testutil"
)

// TestProcessKill9UnderWrites: three `dkv serve` processes whose raft log
// is compacted every few hundred entries into 64 KiB segments (so segments
// are cut and deleted all the time) take 4 KiB puts from 16 clients
// (so the state's memtables flush) while a random member is killed with
// SIGKILL at a random moment and restarted at once, $DKV_KILLS times
// (default 20; the full run is 200). A restarted member may be killed
// again before it is ready: during its replay, a flush or a log
// truncation. Afterwards: no member ever refused its data (exit 11) or
// crashed on its own; every acknowledged put is there; no key was applied
// twice (each is put once, so its version is 1); and HashKV is equal on
// every member at one revision.
func TestProcessKill9UnderWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test; skipped with -short")
	}
	kills := 20
	if v := os.Getenv("DKV_KILLS"); v != "" {
		var err error
		if kills, err = strconv.Atoi(v); err != nil || kills < 1 {
			t.Fatalf("DKV_KILLS=%q: want a positive count", v)
		}
	}
	ms := startProcClusterWith(t, testutil.ClusterOptions{Args: []string{
		"--snapshot-count", "200", "--snapshot-catchup-entries", "100", "--raft-log-segment-bytes", "64KiB"}})
	var eps []string
	for _, m := range ms {
		eps = append(eps, m.ClientAddr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(kills)*3*time.Second+3*time.Minute)
	defer cancel()
	testutil.Eventually(t, 30*time.Second, "a leader", func() bool { return leaderOf(ctx, ms) != nil })
	waitSessions(t, eps)

	var (
		mu       sync.Mutex
		acked    []string
		failures atomic.Int64
		stop     = make(chan struct{})
		wg       sync.WaitGroup
	)
	value := []byte(strings.Repeat("v", 4096))
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := client.New(ctx, client.Config{Endpoints: eps, DialTimeout: 5 * time.Second, AutoSyncInterval: -1})
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Sprintf("k/%02d/%06d", w, i)
				wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := c.Put(wctx, k, value)
				wcancel()
				if err != nil {
					failures.Add(1)
					continue
				}
				mu.Lock()
				acked = append(acked, k)
				mu.Unlock()
			}
		}()
	}

	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 7))
	t.Logf("kills %d, seed %d", kills, seed)
	for k := 0; k < kills; k++ {
		select {
		case <-time.After(time.Duration(100+rng.IntN(500)) * time.Millisecond):
		case <-ctx.Done():
			t.Fatalf("timed out after %d kills", k)
		}
		for _, m := range ms {
			if !m.Running() {
				t.Fatalf("member %s stopped on its own (exit code %d) before kill %d:\n%s", m.Name, m.Cmd.ProcessState.ExitCode(), k+1, m.LogTail(40))
			}
		}
		m := ms[rng.IntN(len(ms))]
		m.Kill()
		m.Start(t)
	}
	// Let the last restart get going before the writers stop, then wait
	// for every member to serve and agree.
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	for _, m := range ms {
		if !m.Running() {
			t.Fatalf("member %s stopped on its own (exit code %d):\n%s", m.Name, m.Cmd.ProcessState.ExitCode(), m.LogTail(40))
		}
	}
	t.Logf("%d puts acknowledged, %d failed or unknown, over %d kills", len(acked), failures.Load(), kills)
	if len(acked) == 0 {
		t.Fatal("no put acknowledged")
	}

	// Every member catches up to the same revision.
	clients := make([]*client.Client, len(ms))
	for i, m := range ms {
		c, err := client.New(ctx, client.Config{Endpoints: []string{m.ClientAddr}, DialTimeout: 10 * time.Second, AutoSyncInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients[i] = c
	}
	var rev int64
	testutil.Eventually(t, 60*time.Second, "every member at one revision", func() bool {
		var revs []int64
		for _, c := range clients {
			sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
			st, err := c.Status(sctx)
			scancel()
			if err != nil {
				return false
			}
			revs = append(revs, st.GetRevision())
		}
		rev = revs[0]
		for _, r := range revs {
			if r != rev {
				return false
			}
		}
		return true
	})
	hashes := map[string]uint64{}
	for i, c := range clients {
		h, err := c.HashKV(ctx, rev)
		if err != nil {
			t.Fatal(err)
		}
		hashes[ms[i].Name] = h.GetHash()
	}
	for _, m := range ms {
		if hashes[m.Name] != hashes[ms[0].Name] {
			t.Errorf("HashKV at revision %d differs between members: %x", rev, hashes)
			break
		}
	}
	t.Logf("HashKV at revision %d: %s", rev, fmt.Sprint(hashes))

	// Every acknowledged put is there, on every member, once.
	have := map[string]bool{}
	res, err := clients[0].Range(ctx, "k/", client.WithPrefix(), client.WithSerializable())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range res.KVs {
		have[kv.Key] = true
		if kv.Version != 1 || kv.CreateRevision != kv.ModRevision {
			t.Errorf("%s: version %d, created at %d, modified at %d: applied more than once", kv.Key, kv.Version, kv.CreateRevision, kv.ModRevision)
		}
	}
	missing := 0
	for _, k := range acked {
		if !have[k] {
			missing++
			if missing <= 5 {
				t.Errorf("acknowledged put %s is missing", k)
			}
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d acknowledged puts missing", missing, len(acked))
	}
}
