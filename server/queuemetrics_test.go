package server_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client/recipe"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/embed"
)

// /metrics reports each queue's jobs by state and the age of its oldest
// visible job, with the same counts as Queue.Stats.
func TestMetricsExportQueueStats(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := embed.Open(ctx, t.TempDir(), embed.WithServerConfig(func(cfg *server.Config) { cfg.HTTPAddr = "127.0.0.1:0" }))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	base := "http://" + embed.Server(c).HTTPAddr()

	orders, err := recipe.NewQueue(c, "orders")
	if err != nil {
		t.Fatal(err)
	}
	mail, err := recipe.NewQueue(c, "mail")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for _, p := range []string{"a", "b", "c", "d"} {
		if _, err := orders.Enqueue(ctx, []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := orders.Enqueue(ctx, []byte("later"), recipe.WithDelay(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := mail.Enqueue(ctx, []byte("m")); err != nil {
		t.Fatal(err)
	}
	// Keys under the queues' prefix that belong to no queue (no name)
	// are skipped, not reported, and do not hide the queues after them.
	for _, k := range []string{"dkv.queue/", "dkv.queue/a", "dkv.queue//x", "dkv.queue//y"} {
		if _, err := c.Put(ctx, k, []byte("stray")); err != nil {
			t.Fatal(err)
		}
	}
	claim := func() *recipe.Job {
		j, err := orders.TryClaim(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	if err := claim().Ack(ctx); err != nil { // done: counted nowhere
		t.Fatal(err)
	}
	held := claim() // claimed
	defer held.Cancel(ctx)
	if err := claim().Nack(ctx, errors.New("bad"), recipe.WithDeadLetter()); err != nil { // dead
		t.Fatal(err)
	}

	body := scrape(t, base)
	elapsed := time.Since(start)
	want := map[[2]string]float64{
		{"orders", "visible"}: 1, {"orders", "claimed"}: 1, {"orders", "scheduled"}: 1, {"orders", "dead"}: 1,
		{"mail", "visible"}: 1, {"mail", "claimed"}: 0, {"mail", "scheduled"}: 0, {"mail", "dead"}: 0,
	}
	for k, w := range want {
		got, ok := metricValue(body, `dkv_queue_jobs{queue="`+k[0]+`",state="`+k[1]+`"}`)
		if !ok || got != w {
			t.Errorf("dkv_queue_jobs{queue=%q,state=%q} = %v (present %v), want %v", k[0], k[1], got, ok, w)
		}
	}
	st, err := orders.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Visible != 1 || st.Claimed != 1 || st.Scheduled != 1 || st.Dead != 1 {
		t.Errorf("Queue.Stats = %+v, disagrees with the metrics' definitions", st)
	}
	for _, q := range []string{"orders", "mail"} {
		age, ok := metricValue(body, `dkv_queue_oldest_age_seconds{queue="`+q+`"}`)
		if !ok || age <= 0 || age > elapsed.Seconds() {
			t.Errorf("dkv_queue_oldest_age_seconds{queue=%q} = %v (present %v), want in (0, %v]", q, age, ok, elapsed.Seconds())
		}
	}
	if n := len(regexp.MustCompile(`(?m)^dkv_queue_oldest_age_seconds\{`).FindAll(body, -1)); n != 2 {
		t.Errorf("%d queues reported, want 2 (orders, mail)", n)
	}
	if v, ok := metricValue(body, "dkv_queue_metrics_truncated"); !ok || v != 0 {
		t.Errorf("dkv_queue_metrics_truncated = %v (present %v), want 0", v, ok)
	}
}

// More queues than one scrape reports: the first ones (in name order)
// are reported and dkv_queue_metrics_truncated says the list is cut.
func TestMetricsQueueCountIsBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	c, err := embed.Open(ctx, t.TempDir(), embed.WithServerConfig(func(cfg *server.Config) { cfg.HTTPAddr = "127.0.0.1:0"; cfg.NoSync = true }))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const queues = 101
	for i := range queues {
		q, err := recipe.NewQueue(c, "q"+strconv.Itoa(1000+i))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.Enqueue(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	body := scrape(t, "http://"+embed.Server(c).HTTPAddr())
	n := len(regexp.MustCompile(`(?m)^dkv_queue_oldest_age_seconds\{`).FindAll(body, -1))
	if n != 100 {
		t.Errorf("%d queues reported, want the cap of 100", n)
	}
	if _, ok := metricValue(body, `dkv_queue_jobs{queue="q1099",state="visible"}`); !ok {
		t.Error("q1099, within the first 100 by name, is not reported")
	}
	if _, ok := metricValue(body, `dkv_queue_jobs{queue="q1100",state="visible"}`); ok {
		t.Error("q1100, the 101st queue, is reported")
	}
	if v, ok := metricValue(body, "dkv_queue_metrics_truncated"); !ok || v != 1 {
		t.Errorf("dkv_queue_metrics_truncated = %v (present %v), want 1", v, ok)
	}
}

func scrape(t *testing.T, base string) []byte {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d %v", resp.StatusCode, err)
	}
	return body
}

// metricValue finds the sample named series (name and labels exactly as
// exposed).
func metricValue(body []byte, series string) (float64, bool) {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	return v, err == nil
}

// /metrics tells keep-alives answered from the leader's memory from those
// that waited for a raft round: the first keep-alive of a lease goes
// through raft, the next ones within the renew window are answered from
// memory; with the window off, every one goes through raft. (A window
// of a minute, so that a slow machine cannot make the second one late.)
func TestMetricsCountKeepAlivesByAnswer(t *testing.T) {
	for _, c := range []struct {
		window              time.Duration
		memory, throughRaft float64
	}{{time.Minute, 2, 1}, {-1, 0, 3}} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cl, err := embed.Open(ctx, t.TempDir(), embed.WithServerConfig(func(cfg *server.Config) {
			cfg.HTTPAddr = "127.0.0.1:0"
			cfg.LeaseRenewWindow = c.window
		}))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		g, err := cl.Grant(ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if _, err := cl.KeepAliveOnce(ctx, g.ID); err != nil {
				t.Fatal(err)
			}
		}
		body := scrape(t, "http://"+embed.Server(cl).HTTPAddr())
		mem, ok1 := metricValue(body, `dkv_lease_keepalives_total{answered="memory"}`)
		raft, ok2 := metricValue(body, `dkv_lease_keepalives_total{answered="raft"}`)
		if !ok1 || !ok2 || mem != c.memory || raft != c.throughRaft {
			t.Errorf("window %v: keep-alives answered from memory %v (%v), through raft %v (%v); want %v and %v", c.window, mem, ok1, raft, ok2, c.memory, c.throughRaft)
		}
	}
}
