package server

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
)

// The raft loop's histograms (entries per fsync and per apply batch, and
// where the loop's time goes) are what the performance work reads; they
// must be in /metrics and count the writes made.
func TestMetricsExportRaftLoopHistograms(t *testing.T) {
	_, base, conn := startHTTPTestServer(t, Config{})
	kv := dkvpb.NewKVClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const puts = 20
	for i := range puts {
		if _, err := kv.Put(ctx, &dkvpb.PutRequest{Key: []byte("m/" + strconv.Itoa(i)), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	body := []byte(scrapeBody(t, base))
	for _, name := range []string{"dkv_raft_sync_entries", "dkv_apply_batch_entries", "dkv_raft_loop_step_seconds", "dkv_raft_loop_send_seconds", "dkv_raft_loop_apply_handoff_seconds"} {
		m := regexp.MustCompile(`(?m)^` + name + `_count (\d+)`).FindSubmatch(body)
		if m == nil {
			t.Errorf("/metrics has no %s histogram", name)
			continue
		}
		// A single member sends no raft messages, so only the send
		// histogram may stay empty here.
		if n, _ := strconv.Atoi(string(m[1])); n == 0 && name != "dkv_raft_loop_send_seconds" {
			t.Errorf("%s_count is 0 after %d puts", name, puts)
		}
	}
	// Every applied entry is in some apply batch: the sum covers the puts.
	m := regexp.MustCompile(`(?m)^dkv_apply_batch_entries_sum (\S+)`).FindSubmatch(body)
	if m == nil {
		t.Fatal("no dkv_apply_batch_entries_sum")
	}
	if sum, _ := strconv.ParseFloat(string(m[1]), 64); sum < puts {
		t.Errorf("dkv_apply_batch_entries_sum = %v, want at least the %d puts", sum, puts)
	}
}

// --cache-bytes reaches the storage engine: /metrics reports the block
// cache at the configured size, or at the default when unset.
func TestMetricsBlockCacheFollowsCacheBytes(t *testing.T) {
	for _, tc := range []struct{ set, want int64 }{{0, DefaultCacheBytes}, {8 << 20, 8 << 20}} {
		_, base, _ := startHTTPTestServer(t, Config{CacheBytes: tc.set})
		body := []byte(scrapeBody(t, base))
		for _, name := range []string{"dkv_block_cache_size_bytes", "dkv_block_cache_hits_total", "dkv_block_cache_misses_total"} {
			if !regexp.MustCompile(`(?m)^` + name + ` \S+`).Match(body) {
				t.Errorf("/metrics has no %s", name)
			}
		}
		m := regexp.MustCompile(`(?m)^dkv_block_cache_capacity_bytes (\S+)`).FindSubmatch(body)
		if m == nil {
			t.Fatal("/metrics has no dkv_block_cache_capacity_bytes")
		}
		if got, _ := strconv.ParseFloat(string(m[1]), 64); got != float64(tc.want) {
			t.Errorf("CacheBytes %d: dkv_block_cache_capacity_bytes = %v, want %d", tc.set, got, tc.want)
		}
	}
}
