package server

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/server/etcdapi"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
)

// metrics is the node's Prometheus registry (one per Server, so several
// nodes can run in one process).
type metrics struct {
	// requestTimeout bounds requests without a deadline (Config).
	requestTimeout time.Duration

	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	// authDenied counts calls refused by auth, by reason
	// (unauthenticated, permission_denied).
	authDenied *prometheus.CounterVec

	// The labelled children of requests and latency, by method, made on
	// a method's first request: looking them up in the vectors on every
	// request (hashing the label values, allocating) was ~6% of a
	// leader's allocations. The methods are the registered gRPC methods,
	// so the map stays small.
	mu      sync.RWMutex
	methods map[string]*methodMetrics
}

// methodMetrics are one method's children: its latency, and its request
// counter per known status code (nil until the code is first seen, so
// /metrics lists only the codes that happened, as before).
type methodMetrics struct {
	latency prometheus.Observer
	codes   [dkverr.NumCodes]prometheus.Counter
}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		requestTimeout: s.cfg.RequestTimeout,
		reg:            prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "dkv", Name: "requests_total",
			Help: "Client requests by gRPC method and DKV status code.",
		}, []string{"method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "dkv", Name: "request_duration_seconds",
			Help:    "Client request latency by gRPC method.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}, []string{"method"}),
		authDenied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "dkv", Name: "auth_denied_total",
			Help: "Calls refused by authentication or authorization, by reason (unauthenticated, permission_denied, throttled: a login refused for too many failed ones).",
		}, []string{"reason"}),
	}
	gauge := func(name, help string, f func() float64) {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "dkv", Name: name, Help: help}, f))
	}
	counter := func(name, help string, f func() float64) {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "dkv", Name: name, Help: help}, f))
	}
	n := s.node
	gauge("raft_commit_index", "Highest raft log index known committed.", func() float64 { return float64(n.Status().Commit) })
	gauge("raft_applied_index", "Highest raft log index applied to the state machine.", func() float64 { return float64(n.Status().Applied) })
	gauge("raft_term", "Current raft term.", func() float64 { return float64(n.Status().Term) })
	gauge("raft_is_leader", "1 when this member is the raft leader.", func() float64 {
		if n.Status().IsLeader {
			return 1
		}
		return 0
	})
	gauge("raft_has_leader", "1 when this member knows a leader.", func() float64 {
		if n.Status().Lead != 0 {
			return 1
		}
		return 0
	})
	gauge("proposals_pending", "Proposals queued for the raft loop.", func() float64 { return float64(n.Stats().PendingProps.Load()) })
	counter("proposals_total", "Proposals made by this member.", func() float64 { return float64(n.Stats().Proposals.Load()) })
	counter("proposals_dropped_total", "Proposals dropped for lack of a leader (and retried).", func() float64 { return float64(n.Stats().ProposalsDrop.Load()) })
	counter("proposals_resent_total", "Writes in a client session proposed again to a new leader because the leader changed while they were pending (each applies once).", func() float64 { return float64(n.Stats().ProposalsResent.Load()) })
	counter("proposals_unknown_total", "Proposals answered with an unknown outcome: the leader changed while they were pending and they were not applied soon after.", func() float64 { return float64(n.Stats().ProposalsUnknown.Load()) })
	counter("apply_batches_total", "Batches of committed entries applied (one Pebble commit each).", func() float64 { return float64(n.Stats().AppliedBatch.Load()) })
	counter("raft_ready_total", "Raft Ready cycles handled.", func() float64 { return float64(n.Stats().Readies.Load()) })
	counter("read_index_rounds_total", "ReadIndex rounds; each serves every read waiting at that moment.", func() float64 { return float64(n.Stats().ReadRounds.Load()) })
	counter("raft_leader_changes_total", "Leader changes seen by this member.", func() float64 { return float64(n.Stats().LeaderChanges.Load()) })
	gauge("mvcc_revision", "Current store revision.", func() float64 { return float64(s.kv.Revision()) })
	gauge("mvcc_compact_revision", "Revision below which history is compacted.", func() float64 { return float64(s.kv.CompactRevision()) })
	gauge("db_size_bytes", "Pebble disk space used.", func() float64 { return float64(s.dbSize()) })
	gauge("storage_layout", "Layout of the replicated keyspace on this member: 2 writes each value twice (latest and history records), 3 once. A cluster moves to 3 once every member runs dkv 0.3 or later (docs/operations.md#upgrades).", func() float64 { return float64(s.kv.Layout()) })
	gauge("raft_log_bytes", "Disk space the raft log's segment files take (raftlog/ in the data dir; part of db_size_bytes and db_size_in_use_bytes, which --quota-bytes is compared with).", func() float64 { return float64(s.store.LogBytes()) })
	gauge("db_size_in_use_bytes", "What the database's live files take (the write-ahead log, the current tables and blob files; not a flush's or compaction's output under way nor files waiting for deletion); --quota-bytes is compared with it.",
		func() float64 { return float64(s.dbInUse()) })
	for _, a := range []struct {
		answered string
		n        *atomic.Uint64
	}{{"memory", &s.renewer.fromMemory}, {"raft", &s.renewer.throughRaft}} {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "dkv", Name: "lease_keepalives_total", ConstLabels: prometheus.Labels{"answered": a.answered},
			Help: "Leases kept alive through this member, by how the keep-alive was answered: memory (by the leader, within the renew window of its own renewal) or raft (after a LeaseRenew entry applied).",
		}, func() float64 { return float64(a.n.Load()) }))
	}
	counter("disk_full_total", "Writes that met ENOSPC; each released the ballast file (if any) and was retried.", func() float64 { return float64(s.diskFulls.Load()) })
	gauge("nospace_alarms", "Members whose NOSPACE alarm is raised; while above 0 the cluster refuses writes that add data.", func() float64 { return float64(s.sm.Alarms().Count()) })
	gauge("corrupt_alarms", "Members whose CORRUPT alarm is raised: their state diverged from the others'; each refuses client requests (alert on > 0).", func() float64 { return float64(s.sm.Alarms().CorruptCount()) })
	m.reg.MustRegister(n.Stats().PersistSeconds, n.Stats().ApplySeconds, n.Stats().ProposalSeconds)
	// Where the raft loop spends its time and how many entries share an
	// fsync and an apply batch (BENCHMARKS.md).
	m.reg.MustRegister(n.Stats().LoopCollectors()...)
	counter("raft_log_divergence_total", "Raft messages dropped because they show a log that differs from this member's: on a follower, appends from the leader showing its committed log differs from the leader's; on the leader, acknowledgements of entries it does not have. The member whose log differs cannot catch up and must be removed and re-added.", func() float64 { return float64(n.Stats().LogDivergence.Load()) })
	// The job queues' statistics, computed on scrape.
	m.reg.MustRegister(newQueueCollector(s.kv, s.store.DB))
	registerOpsMetrics(s, m.reg)
	if s.transport != nil {
		m.reg.MustRegister(s.transport.Metrics())
	}
	m.reg.MustRegister(m.requests, m.latency, m.authDenied, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) observe(method string, start time.Time, err error) {
	code := dkverr.CodeOf(err)
	if code == dkverr.Internal && etcdapi.IsEtcdMethod(method) {
		code = etcdapi.DKVCode(err) // etcd's statuses carry no DKV code
	}
	m.mu.RLock()
	mm := m.methods[method]
	var c prometheus.Counter
	if mm != nil && code >= 0 && int(code) < len(mm.codes) {
		c = mm.codes[code]
	}
	m.mu.RUnlock()
	if c == nil {
		mm, c = m.children(method, code)
	}
	c.Inc()
	mm.latency.Observe(time.Since(start).Seconds())
}

// children makes (once) method's children and its counter for code.
func (m *metrics) children(method string, code dkverr.Code) (*methodMetrics, prometheus.Counter) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mm := m.methods[method]
	if mm == nil {
		if m.methods == nil {
			m.methods = map[string]*methodMetrics{}
		}
		mm = &methodMetrics{latency: m.latency.WithLabelValues(method)}
		m.methods[method] = mm
	}
	if code < 0 || int(code) >= len(mm.codes) {
		return mm, m.requests.WithLabelValues(method, code.String()) // not a known code: not cached
	}
	if mm.codes[code] == nil {
		mm.codes[code] = m.requests.WithLabelValues(method, code.String())
	}
	return mm, mm.codes[code]
}

func (m *metrics) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	timeout := m.requestTimeout
	if blockingWait(req) {
		timeout = 0
	}
	ctx, cancel := shaveDeadline(ctx, timeout)
	defer cancel()
	resp, err := handler(ctx, req)
	m.observe(info.FullMethod, start, err)
	return resp, err
}

func (m *metrics) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	start := time.Now()
	err := handler(srv, ss)
	m.observe(info.FullMethod, start, err)
	return err
}

// DefaultRequestTimeout is the default Config.RequestTimeout: it bounds
// requests that carry no deadline, except blocking waits.
const DefaultRequestTimeout = 30 * time.Second

// DefaultAuthTokenTTL is the default Config.AuthTokenTTL.
const DefaultAuthTokenTTL = 5 * time.Minute

// blockingWait reports whether req waits for something other clients do
// (a lock grant, and so an election): such a wait may rightly last hours
// and ends only with its caller's context, never at a server default.
func blockingWait(req any) bool {
	r, ok := req.(*dkvpb.LockAcquireRequest)
	return ok && r.GetWait()
}

// shaveDeadline ends the server's work slightly before the client's
// deadline, so that a request that cannot be served (no leader, no quorum)
// gets a definite answer (Unavailable) instead of racing the client's own
// DeadlineExceeded, which would leave the caller unsure of the outcome.
//
// A request without a deadline gets timeout (none if 0): a proposal lost
// in a leader change would otherwise wait forever.
func shaveDeadline(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok {
		if timeout <= 0 {
			return context.WithCancel(ctx)
		}
		return context.WithTimeout(ctx, timeout)
	}
	margin := min(time.Until(dl)/10, 50*time.Millisecond)
	return context.WithDeadline(ctx, dl.Add(-margin))
}
