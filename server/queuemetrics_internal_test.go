package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/queuekeys"
)

// A queue with more keys than a scrape reads reports lower bounds and
// says it was cut short, without reading past its budget.
func TestMetricsQueueKeysAreBounded(t *testing.T) {
	defer func(n int) { maxMetricQueueKeys = n }(maxMetricQueueKeys)
	maxMetricQueueKeys = 5
	_, base, conn := startHTTPTestServer(t, Config{})
	kv := dkvpb.NewKVClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	put := func(k string) {
		if _, err := kv.Put(ctx, &dkvpb.PutRequest{Key: []byte(k), Value: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 8 {
		put(queuekeys.Prefix("big") + queuekeys.Jobs + queuekeys.Order(0, 0, fmt.Sprintf("%016x%08x", 1000+i, i)))
	}
	for i := range 2 {
		put(queuekeys.Prefix("small") + queuekeys.Jobs + queuekeys.Order(0, 0, fmt.Sprintf("%016x%08x", 1000+i, i)))
	}
	body := scrapeBody(t, base)
	for series, want := range map[string]string{
		`dkv_queue_jobs{queue="big",state="visible"}`:   "5",
		`dkv_queue_jobs{queue="small",state="visible"}`: "2",
		`dkv_queue_metrics_truncated`:                   "1",
	} {
		if got := sampleOf(body, series); got != want {
			t.Errorf("%s = %q, want %s", series, got, want)
		}
	}
}

func scrapeBody(t *testing.T, base string) string {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// sampleOf is the value of the sample named series ("" if absent).
func sampleOf(body, series string) string {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}
