package server

import (
	"bytes"
	"fmt"
	"math"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/dkv-io/dkv/internal/keyrange"
	"github.com/dkv-io/dkv/internal/mvcc"
	"github.com/dkv-io/dkv/internal/queuekeys"
	"github.com/prometheus/client_golang/prometheus"
)

// Bounds of one scrape's queue scan, so /metrics stays cheap however
// big the queues grow: at most maxMetricQueues queues (in name order) are
// reported, and each is read through at most maxMetricQueueKeys keys
// (its claim markers, then its jobs, then its dead letters). A queue cut
// short reports the counts it reached, which are then lower bounds, and
// dkv_queue_metrics_truncated says so.
const maxMetricQueues = 100

// maxMetricQueueKeys is a variable so a test can lower it.
var maxMetricQueueKeys = 10000

// queueCollector exports the job queues' statistics (client/recipe's
// Queue.Stats, with the same definitions) computed on scrape from this
// member's local store: keys only, from one Pebble snapshot. A follower
// may lag the leader by its apply delay.
type queueCollector struct {
	kv   *mvcc.Store
	db   func() *pebble.DB
	now  func() time.Time
	jobs *prometheus.Desc
	age  *prometheus.Desc
	trun *prometheus.Desc
}

func newQueueCollector(kv *mvcc.Store, db func() *pebble.DB) *queueCollector {
	return &queueCollector{
		kv: kv, db: db, now: time.Now,
		jobs: prometheus.NewDesc("dkv_queue_jobs", "Jobs of a queue by state (visible, claimed, scheduled, dead), as in Queue.Stats, read from this member's store.", []string{"queue", "state"}, nil),
		age:  prometheus.NewDesc("dkv_queue_oldest_age_seconds", "How long the oldest visible job of a queue has waited since it was enqueued (0 when none is visible).", []string{"queue"}, nil),
		trun: prometheus.NewDesc("dkv_queue_metrics_truncated", fmt.Sprintf("1 when this scrape's queue metrics were cut short: more than %d queues (the rest are not reported) or a queue with more than %d keys (its counts are lower bounds).", maxMetricQueues, maxMetricQueueKeys), nil, nil),
	}
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.jobs
	ch <- c.age
	ch <- c.trun
}

// queueStat is one queue's counts.
type queueStat struct {
	name                              string
	visible, claimed, scheduled, dead int64
	oldestAge                         time.Duration
	truncated                         bool
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	db := c.db()
	if db == nil {
		return
	}
	snap := db.NewSnapshot()
	defer snap.Close()
	stats, truncated, err := c.scan(snap, c.now())
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.jobs, err)
		return
	}
	for _, st := range stats {
		for _, s := range []struct {
			state string
			n     int64
		}{{"visible", st.visible}, {"claimed", st.claimed}, {"scheduled", st.scheduled}, {"dead", st.dead}} {
			ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.GaugeValue, float64(s.n), st.name, s.state)
		}
		ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, st.oldestAge.Seconds(), st.name)
		truncated = truncated || st.truncated
	}
	t := 0.0
	if truncated {
		t = 1
	}
	ch <- prometheus.MustNewConstMetric(c.trun, prometheus.GaugeValue, t)
}

// scan finds the queues under queuekeys.Root by skipping from one
// queue's prefix to the next (so a scrape reads no key of a queue beyond
// its budget), and counts each. truncated: there were more queues.
func (c *queueCollector) scan(r pebble.Reader, now time.Time) (out []queueStat, truncated bool, err error) {
	root := []byte(queuekeys.Root)
	end := keyrange.PrefixEnd(root)
	start := root
	strays := 0 // keys under Root that belong to no queue
	for {
		var name string
		found := false
		err := c.kv.ScanKeys(r, start, end, func(k []byte) bool {
			found = true
			rest := k[len(root):]
			switch i := bytes.IndexByte(rest, '/'); {
			case i > 0:
				name = string(rest[:i])
			case i == 0:
				// "Root/...": an empty name, no queue's; skip them all.
				start = keyrange.PrefixEnd(k[:len(root)+1])
			default:
				// "Root<x>" with no '/': step past it.
				start = append(append([]byte(nil), k...), 0)
			}
			return false
		})
		if err != nil {
			return nil, false, err
		}
		if !found {
			return out, false, nil
		}
		if name == "" {
			if strays++; strays > maxMetricQueueKeys {
				return out, true, nil
			}
			continue
		}
		if len(out) == maxMetricQueues {
			return out, true, nil
		}
		st, err := c.queue(r, name, now)
		if err != nil {
			return nil, false, err
		}
		out = append(out, st)
		// The next queue's keys start past every key of "<name>/".
		start = keyrange.PrefixEnd([]byte(queuekeys.Prefix(name)))
	}
}

// queue counts one queue as Queue.Stats does: a job is claimed if its
// claim marker exists, else scheduled if its run-at is in the future,
// else visible.
func (c *queueCollector) queue(r pebble.Reader, name string, now time.Time) (queueStat, error) {
	st := queueStat{name: name}
	p := queuekeys.Prefix(name)
	budget := maxMetricQueueKeys
	scan := func(sub string, fn func(rest string)) error {
		pre := []byte(p + sub)
		return c.kv.ScanKeys(r, pre, keyrange.PrefixEnd(pre), func(k []byte) bool {
			if budget == 0 {
				st.truncated = true
				return false
			}
			budget--
			fn(string(k[len(pre):]))
			return true
		})
	}
	claimed := map[string]bool{}
	if err := scan(queuekeys.Claims, func(rest string) { claimed[rest] = true }); err != nil {
		return st, err
	}
	nowMs := now.UnixMilli()
	oldest := int64(math.MaxInt64)
	err := scan(queuekeys.Jobs, func(rest string) {
		k, ok := queuekeys.ParseOrder(rest)
		switch {
		case !ok:
		case claimed[k.Order]:
			st.claimed++
		case k.RunAtMs > nowMs:
			st.scheduled++
		default:
			st.visible++
			oldest = min(oldest, k.EnqNanos)
		}
	})
	if err != nil {
		return st, err
	}
	if err := scan(queuekeys.Dead, func(string) { st.dead++ }); err != nil {
		return st, err
	}
	if st.visible > 0 {
		st.oldestAge = max(now.Sub(time.Unix(0, oldest)), 0)
	}
	return st, nil
}
