package recipe

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/internal/queuekeys"
)

// QueueClient is what a Queue needs of a client: *client.Client (remote
// or embedded) satisfies it.
type QueueClient interface {
	client.KV
	client.Locker
	client.Lease
	client.Watcher
}

// Errors of the queue, matched with errors.Is.
var (
	// ErrClaimExpired: the job's claim is no longer current (its
	// visibility timeout passed, or the job was claimed again, acked or
	// dead-lettered by someone else), so the operation was refused and
	// changed nothing. It also matches client.ErrLocked.
	ErrClaimExpired = fmt.Errorf("queue: the claim is no longer held: it expired, or the job was acked, nacked or claimed again: %w", client.ErrLocked)
	// ErrNoJob: TryClaim found no visible job.
	ErrNoJob = errors.New("queue: no visible job")
)

// Defaults of a Queue.
const (
	DefaultVisibilityTimeout = 30 * time.Second
	DefaultMaxAttempts       = 10
	DefaultIdempotencyWindow = 24 * time.Hour
)

// Limits checked by the queue (each refused with client.ErrInvalidInput).
const (
	MaxQueueNameLen      = 128
	MaxIdempotencyKeyLen = 256
)

// QueueOption configures NewQueue.
type QueueOption func(*queueConfig)

type queueConfig struct {
	visibility  time.Duration
	maxAttempts int
	idemWindow  time.Duration
	backoff     func(attempt int) time.Duration
}

// WithVisibilityTimeout sets how long a claim lasts without Extend
// (default 30s, at least 1s): a consumer that crashes or pauses holds its
// job this long before another consumer can claim it.
func WithVisibilityTimeout(d time.Duration) QueueOption {
	return func(c *queueConfig) { c.visibility = d }
}

// WithDefaultMaxAttempts sets the attempts a job gets unless Enqueue says
// otherwise (default 10). A job claimed that many times without an Ack
// moves to the dead-letter list.
func WithDefaultMaxAttempts(n int) QueueOption { return func(c *queueConfig) { c.maxAttempts = n } }

// WithIdempotencyWindow sets how long an idempotency key is remembered
// (default 24h, at least 1s).
func WithIdempotencyWindow(d time.Duration) QueueOption {
	return func(c *queueConfig) { c.idemWindow = d }
}

// WithBackoff replaces the delay before a nacked job is visible again.
// attempt is the attempt that failed (1 for the first). The default is
// attempt⁴ seconds plus up to 10% (at least 1s) of jitter.
func WithBackoff(fn func(attempt int) time.Duration) QueueOption {
	return func(c *queueConfig) { c.backoff = fn }
}

// DefaultBackoff is attempt⁴ seconds plus a random jitter of up to 10% of
// that (at least up to 1s), so jobs that failed together do not come back
// together.
func DefaultBackoff(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	base := time.Duration(math.Min(math.Pow(float64(attempt), 4), 365*24*3600)) * time.Second
	span := max(base/10, time.Second)
	return base + time.Duration(mrand.Int64N(int64(span)))
}

// Queue is a named job queue. It holds no state of its own beyond its
// configuration: any number of Queue values, in any processes, on the
// same name share one queue.
type Queue struct {
	c      QueueClient
	name   string
	prefix string
	cfg    queueConfig
	// contention estimates how many consumers of this Queue value race
	// for the same jobs (see spread).
	contention atomic.Int32
	// noServerClaim is set once the server answered that it has no Queue
	// service (an older server): claims then scan and race for locks.
	noServerClaim atomic.Bool
}

// QueueAcker is the server-side ack (client.Client has it): one raft
// command that deletes the job and its marker, writes the puts of a nack
// or dead-lettering and releases the claim. A QueueClient without it
// acks with a txn and a release.
type QueueAcker interface {
	QueueAck(ctx context.Context, h client.LockHandle, markerKey string, puts ...client.QueuePut) (already bool, err error)
}

// QueueClaimer is the server-side claim (client.Client has it): one raft
// command that finds the first visible job and locks it. A QueueClient
// without it claims by scanning the queue and racing for job locks.
type QueueClaimer interface {
	QueueClaim(ctx context.Context, prefix string, ttl time.Duration) (*client.QueueClaimResult, error)
}

// QueuePrefix is the key prefix under which queue name keeps its state.
func QueuePrefix(name string) string { return queuekeys.Prefix(name) }

// NewQueue returns the queue called name (1 to 128 bytes, no '/').
func NewQueue(c QueueClient, name string, opts ...QueueOption) (*Queue, error) {
	if name == "" || len(name) > MaxQueueNameLen || strings.ContainsAny(name, "/\x00") {
		return nil, &client.Error{Kind: client.ErrInvalidInput, Msg: fmt.Sprintf("queue name %.40q: it must be 1 to %d bytes without '/'", name, MaxQueueNameLen)}
	}
	cfg := queueConfig{visibility: DefaultVisibilityTimeout, maxAttempts: DefaultMaxAttempts, idemWindow: DefaultIdempotencyWindow, backoff: DefaultBackoff}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.visibility < time.Second {
		return nil, invalid("visibility timeout %v: it must be at least 1s", cfg.visibility)
	}
	if cfg.idemWindow < time.Second {
		return nil, invalid("idempotency window %v: it must be at least 1s", cfg.idemWindow)
	}
	if cfg.maxAttempts < 1 {
		return nil, invalid("max attempts %d: it must be at least 1", cfg.maxAttempts)
	}
	if cfg.backoff == nil {
		cfg.backoff = DefaultBackoff
	}
	return &Queue{c: c, name: name, prefix: QueuePrefix(name), cfg: cfg}, nil
}

func invalid(format string, args ...any) error {
	return &client.Error{Kind: client.ErrInvalidInput, Msg: fmt.Sprintf(format, args...)}
}

// Name is the queue's name.
func (q *Queue) Name() string { return q.name }

// Key layout under the queue's prefix P:
//
//	P j/<order>   a waiting job (visible, scheduled or claimed); value jobRecord
//	P c/<order>   the claim marker of j/<order>, on the claim's lease
//	P d/<id>      a dead-lettered job; value jobRecord
//	P i/<key>     an idempotency key, on a lease of the window; value the job id
//	P c/paused    present while the queue is paused (under c/, so the
//	              scan's read of the markers sees it too)
//
// <order> is <priority><run-at><id>, fixed-width hex, so a range read in
// key order meets jobs in claim order: higher priority first, then earlier
// run-at, then earlier enqueue. <id> is <enqueue-nanos><random> and stays
// with the job when a Nack moves it to a later run-at.
//
// The claim itself is a lock on j/<order>; the marker exists only so that
// a range read can tell claimed jobs from visible ones (lock grants are
// not key events), and so that a claim's expiry, which deletes the
// marker with its lease, is a watch event that wakes waiting consumers.
func (q *Queue) jobsPrefix() string   { return q.prefix + queuekeys.Jobs }
func (q *Queue) claimsPrefix() string { return q.prefix + queuekeys.Claims }
func (q *Queue) deadPrefix() string   { return q.prefix + queuekeys.Dead }
func (q *Queue) idemPrefix() string   { return q.prefix + queuekeys.Idem }
func (q *Queue) pausedKey() string    { return q.prefix + queuekeys.Paused }

// The key layout is internal/queuekeys', shared with the server's claim
// and its /metrics collector.
const (
	orderLen = queuekeys.OrderLen
	idLen    = queuekeys.IDLen
)

func orderOf(priority int32, runAtMs int64, id string) string {
	return queuekeys.Order(priority, runAtMs, id)
}

type orderKey struct {
	order    string
	priority int32
	runAtMs  int64
	id       string
	enqNanos int64
}

func parseOrder(s string) (orderKey, bool) {
	k, ok := queuekeys.ParseOrder(s)
	return orderKey{order: k.Order, priority: k.Priority, runAtMs: k.RunAtMs, id: k.ID, enqNanos: k.EnqNanos}, ok
}

var idClock struct {
	sync.Mutex
	last int64
}

// newID is the enqueue time in nanoseconds, strictly increasing within
// this process, plus 32 random bits so ids from different processes
// differ.
func newID(now time.Time) string {
	idClock.Lock()
	n := now.UnixNano()
	if n <= idClock.last {
		n = idClock.last + 1
	}
	idClock.last = n
	idClock.Unlock()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%016x%s", uint64(n), hex.EncodeToString(b[:]))
}

// jobRecord is a job's stored state.
type jobRecord struct {
	ID          string `json:"id"`
	Payload     []byte `json:"payload"`
	Priority    int32  `json:"priority,omitempty"`
	RunAtMs     int64  `json:"run_at_ms"`
	EnqueuedMs  int64  `json:"enqueued_ms"`
	Attempt     int    `json:"attempt,omitempty"`
	MaxAttempts int    `json:"max_attempts"`
	LastError   string `json:"last_error,omitempty"`
	IdemKey     string `json:"idempotency_key,omitempty"`
	DeadMs      int64  `json:"dead_ms,omitempty"`
}

func (r *jobRecord) order() string { return orderOf(r.Priority, r.RunAtMs, r.ID) }

func (r *jobRecord) encode() []byte {
	b, _ := json.Marshal(r)
	return b
}

func decodeRecord(kv *client.KeyValue) (*jobRecord, error) {
	var r jobRecord
	if err := json.Unmarshal(kv.Value, &r); err != nil || r.ID == "" {
		return nil, fmt.Errorf("queue: malformed job record at %q: %v", kv.Key, err)
	}
	return &r, nil
}

// JobInfo describes a job without claiming it (List, Dead, Inspect).
type JobInfo struct {
	ID          string
	Payload     []byte
	Priority    int32
	RunAt       time.Time
	EnqueuedAt  time.Time
	Attempt     int // attempts made so far
	MaxAttempts int
	// LastError is the error of the last Nack, or why the job was
	// dead-lettered.
	LastError      string
	IdempotencyKey string
	// State is "visible", "scheduled", "claimed" or "dead".
	State string
}

func (r *jobRecord) info(state string) JobInfo {
	return JobInfo{ID: r.ID, Payload: r.Payload, Priority: r.Priority, RunAt: time.UnixMilli(r.RunAtMs),
		EnqueuedAt: time.Unix(0, idNanos(r.ID)), Attempt: r.Attempt, MaxAttempts: r.MaxAttempts,
		LastError: r.LastError, IdempotencyKey: r.IdemKey, State: state}
}

func idNanos(id string) int64 {
	n, _ := strconv.ParseUint(id[:min(16, len(id))], 16, 64)
	return int64(n)
}

// EnqueueOption configures Enqueue.
type EnqueueOption func(*enqueueConfig)

type enqueueConfig struct {
	priority    int32
	runAt       time.Time
	delay       time.Duration
	maxAttempts int
	idemKey     string
}

// WithPriority sets the job's priority (default 0); higher is claimed
// first.
func WithPriority(p int32) EnqueueOption { return func(c *enqueueConfig) { c.priority = p } }

// WithRunAt makes the job visible at t, not before.
func WithRunAt(t time.Time) EnqueueOption { return func(c *enqueueConfig) { c.runAt = t } }

// WithDelay makes the job visible d from now.
func WithDelay(d time.Duration) EnqueueOption { return func(c *enqueueConfig) { c.delay = d } }

// WithMaxAttempts sets how many claims the job gets before it is
// dead-lettered (default: the queue's).
func WithMaxAttempts(n int) EnqueueOption { return func(c *enqueueConfig) { c.maxAttempts = n } }

// WithIdempotencyKey makes Enqueue return the existing job, not a new
// one, when a job was enqueued with the same key within the queue's
// idempotency window. It also makes Enqueue safe to retry after
// client.ErrUnknownOutcome, which Enqueue then does itself.
func WithIdempotencyKey(key string) EnqueueOption { return func(c *enqueueConfig) { c.idemKey = key } }

// Enqueued is the result of Enqueue.
type Enqueued struct {
	ID string
	// Duplicate is true when the idempotency key matched an earlier job,
	// whose id ID then is.
	Duplicate bool
}

// maxWriteRetries bounds the retries of a write whose outcome was unknown
// (a leader died under it) where the queue can retry safely.
const maxWriteRetries = 8

// maybeApplied says whether a failed write may have applied.
func maybeApplied(err error) bool {
	return errors.Is(err, client.ErrUnknownOutcome) || errors.Is(err, context.DeadlineExceeded)
}

// lastAttempt is the error to report when the retries of a write end
// with err. If an earlier attempt's outcome was unknown, that attempt may
// have applied, so a definite-looking last error (Unavailable: "not
// applied") would be a lie: a done job would look not done, and be done
// again or counted as lost. The caller learns the outcome is unknown.
func lastAttempt(err error, unknown bool, what, id string) error {
	if !unknown || maybeApplied(err) {
		return err
	}
	return fmt.Errorf("%s job %s: %v, after an attempt whose outcome is unknown: %w", what, id, err, client.ErrUnknownOutcome)
}

func retryable(err error) bool {
	return errors.Is(err, client.ErrUnknownOutcome) || errors.Is(err, client.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)
}

// Enqueue adds a job with payload to the queue. Without an idempotency key
// an Enqueue that fails with client.ErrUnknownOutcome may or may not have
// added the job; with one, Enqueue retries and the job exists once.
func (q *Queue) Enqueue(ctx context.Context, payload []byte, opts ...EnqueueOption) (*Enqueued, error) {
	cfg := enqueueConfig{maxAttempts: q.cfg.maxAttempts}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.maxAttempts < 1 {
		return nil, invalid("max attempts %d: it must be at least 1", cfg.maxAttempts)
	}
	if len(cfg.idemKey) > MaxIdempotencyKeyLen {
		return nil, invalid("idempotency key of %d bytes: the limit is %d", len(cfg.idemKey), MaxIdempotencyKeyLen)
	}
	if cfg.delay < 0 {
		return nil, invalid("delay %v: it must not be negative", cfg.delay)
	}
	now := time.Now()
	runAt := now
	if !cfg.runAt.IsZero() && cfg.runAt.After(now) {
		runAt = cfg.runAt
	}
	if cfg.delay > 0 {
		runAt = now.Add(cfg.delay)
	}
	rec := &jobRecord{ID: newID(now), Payload: payload, Priority: cfg.priority, RunAtMs: runAt.UnixMilli(),
		EnqueuedMs: now.UnixMilli(), MaxAttempts: cfg.maxAttempts, IdemKey: cfg.idemKey}
	jobKey := q.jobsPrefix() + rec.order()
	if cfg.idemKey == "" {
		if _, err := q.c.Put(ctx, jobKey, rec.encode(), client.IfAbsent()); err != nil {
			return nil, err
		}
		return &Enqueued{ID: rec.ID}, nil
	}
	idemKey := q.idemPrefix() + cfg.idemKey
	for n := 0; ; n++ {
		res, err := q.c.Txn(ctx).If(client.Missing(idemKey)).
			Then(client.OpPut(jobKey, rec.encode()), client.OpPut(idemKey, []byte(rec.ID), client.WithTTL(q.cfg.idemWindow))).
			Else(client.OpGet(idemKey)).Commit()
		if err != nil {
			if retryable(err) && n < maxWriteRetries && ctx.Err() == nil {
				continue // the Else branch finds an earlier success
			}
			return nil, err
		}
		if res.Succeeded {
			return &Enqueued{ID: rec.ID}, nil
		}
		if g := res.Responses[0].Get; g != nil && len(g.KVs) == 1 {
			id := string(g.KVs[0].Value)
			return &Enqueued{ID: id, Duplicate: id != rec.ID}, nil
		}
		// The key's lease ended between the compare and the read: try again.
	}
}

// Job is a claimed job. Its claim lasts the queue's visibility timeout
// from the claim (or the last Extend); after that the job is visible to
// other consumers again and every operation on this Job, and every write
// made WithClaim(job), fails with ErrClaimExpired.
type Job struct {
	q   *Queue
	key string // j/<order>
	rec jobRecord

	ID          string
	Payload     []byte
	Priority    int32
	RunAt       time.Time
	EnqueuedAt  time.Time
	Attempt     int // 1 on the first claim
	MaxAttempts int
	// LastError is the error of the previous attempt's Nack, if any.
	LastError string
	// Handle is the claim: a lock on the job's key. Its Token is the
	// claim's fencing token, larger for every later claim of the job.
	Handle client.LockHandle
	// Deadline is when the claim expires unless extended, as estimated by
	// this process's clock (the claim may end earlier, never later
	// without an Extend).
	Deadline time.Time
}

// Token is the claim's fencing token: pass it to systems outside DKV so
// they can refuse a late result of an expired claim.
func (j *Job) Token() int64 { return j.Handle.Token }

// WithClaim makes a write (Put, Delete, Txn op) conditional on job's
// claim being current: it is refused with client.ErrLocked once the claim
// expired or moved on. It is client.WithLock(job.Handle).
func WithClaim(job *Job) client.OpOption { return client.WithLock(job.Handle) }

// Claimed reports whether the job's claim is still current, at a
// linearizable point.
func (j *Job) Claimed(ctx context.Context) (bool, error) {
	info, err := j.q.c.DescribeLock(ctx, j.key)
	if err != nil {
		return false, err
	}
	return info.Holder != nil && *info.Holder == j.Handle, nil
}

// Extend renews the claim to the full visibility timeout (a heartbeat for
// long jobs); ErrClaimExpired if the claim already ended.
func (j *Job) Extend(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	ttl, err := j.q.c.Renew(ctx, j.Handle)
	if err != nil {
		if errors.Is(err, client.ErrLocked) || errors.Is(err, client.ErrLeaseNotFound) {
			return 0, fmt.Errorf("extending job %s: %w", j.ID, ErrClaimExpired)
		}
		return 0, err
	}
	j.Deadline = start.Add(ttl)
	return ttl, nil
}

// finish applies ops to the job under its claim: the job's key is
// deleted (with the claim's handle) and its marker, with extra. It
// retries a write whose outcome is unknown. With the server's Queue.Ack
// it is one command that also ends the claim, and a retry is told when
// the first attempt applied. Otherwise it is a txn plus a release: the
// lock on the deleted key stays ours until released, so a retry that
// finds the lock ours and the key gone knows the first attempt applied.
func (j *Job) finish(ctx context.Context, what string, puts ...client.QueuePut) error {
	q := j.q
	if acker, ok := q.c.(QueueAcker); ok && !q.noServerClaim.Load() {
		unknown := false // an earlier attempt's outcome was not learnt
		for n := 0; ; n++ {
			already, err := acker.QueueAck(ctx, j.Handle, q.claimsPrefix()+j.rec.order(), puts...)
			switch {
			case err == nil && (!already || unknown):
				// Done now, or (already) by our earlier attempt.
				return nil
			case err == nil || errors.Is(err, client.ErrLocked):
				if unknown {
					// An earlier attempt may have applied (and released
					// the claim) before this one was refused: saying
					// "expired" would report a done job as not done.
					return fmt.Errorf("%s job %s: the claim is gone after an attempt whose outcome is unknown: %w", what, j.ID, client.ErrUnknownOutcome)
				}
				// already on a first attempt: this claim was acked before.
				return fmt.Errorf("%s job %s: %w", what, j.ID, ErrClaimExpired)
			case status.Code(errors.Unwrap(err)) == codes.Unimplemented || status.Code(err) == codes.Unimplemented:
				q.noServerClaim.Store(true) // an older server: the txn below
			default:
				unknown = unknown || maybeApplied(err)
				if !retryable(err) || n >= maxWriteRetries || ctx.Err() != nil {
					return lastAttempt(err, unknown, what, j.ID)
				}
				continue
			}
			break
		}
	}
	ops := []client.Op{client.OpDelete(j.key, client.WithLock(j.Handle)), client.OpDelete(q.claimsPrefix() + j.rec.order())}
	for _, p := range puts {
		ops = append(ops, client.OpPut(p.Key, p.Value))
	}
	var err error
	unknown := false // an earlier attempt's outcome was not learnt
	for n := 0; ; n++ {
		var res *client.TxnResult
		res, err = q.c.Txn(ctx).If(client.LockHeld(j.Handle), client.Exists(j.key)).Then(ops...).Commit()
		if err == nil && res.Succeeded {
			break
		}
		if err == nil || errors.Is(err, client.ErrLocked) {
			// Either the claim is gone, or our own earlier attempt (whose
			// outcome we did not learn) applied: then the key is gone,
			// and the lock is still ours unless it expired since.
			held, derr := j.Claimed(ctx)
			if derr != nil {
				return derr
			}
			_, gerr := q.c.Get(ctx, j.key)
			gone := errors.Is(gerr, client.ErrNotFound)
			if gerr != nil && !gone {
				return gerr
			}
			switch {
			case held && gone:
				err = nil // our earlier attempt applied
			case unknown && gone:
				// Our earlier attempt, or another consumer's after our
				// claim expired: we cannot tell.
				return fmt.Errorf("%s job %s: the claim expired after an attempt whose outcome is unknown: %w", what, j.ID, client.ErrUnknownOutcome)
			default:
				return fmt.Errorf("%s job %s: %w", what, j.ID, ErrClaimExpired)
			}
			break
		}
		unknown = unknown || maybeApplied(err)
		if !retryable(err) || n >= maxWriteRetries || ctx.Err() != nil {
			return lastAttempt(err, unknown, what, j.ID)
		}
	}
	// Before returning, end the claim itself, so that writes made
	// WithClaim(j) are refused from now on, not only once the visibility
	// timeout passes.
	j.release()
	return nil
}

// release gives the lock (and its lease) back; should that keep failing,
// the lease expires after the visibility timeout.
func (j *Job) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for n := 0; n < maxWriteRetries; n++ {
		if err := j.q.c.Release(ctx, j.Handle); err == nil || !retryable(err) {
			return
		}
	}
}

// Ack completes the job: it is removed from the queue. ErrClaimExpired if
// the claim is no longer current; the job is then someone else's (or
// visible again) and this attempt's result must be discarded.
func (j *Job) Ack(ctx context.Context) error { return j.finish(ctx, "acking") }

// NackOption configures Nack.
type NackOption func(*nackConfig)

type nackConfig struct {
	delay    time.Duration
	hasDelay bool
	dead     bool
}

// WithRetryAfter overrides the backoff: the job is visible again after d.
func WithRetryAfter(d time.Duration) NackOption {
	return func(c *nackConfig) { c.delay, c.hasDelay = d, true }
}

// WithDeadLetter moves the job to the dead-letter list at once, whatever
// its attempts left.
func WithDeadLetter() NackOption { return func(c *nackConfig) { c.dead = true } }

// Nack fails this attempt: the job is visible again after the queue's
// backoff (or WithRetryAfter), or, if it has used its attempts, moves to
// the dead-letter list. cause is kept as the job's LastError.
// ErrClaimExpired if the claim is no longer current.
func (j *Job) Nack(ctx context.Context, cause error, opts ...NackOption) error {
	var cfg nackConfig
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	rec := j.rec
	if cause != nil {
		rec.LastError = cause.Error()
	} else {
		rec.LastError = "nacked"
	}
	if cfg.dead || rec.Attempt >= rec.MaxAttempts {
		return j.finish(ctx, "nacking", q2dead(j.q, &rec))
	}
	delay := cfg.delay
	if !cfg.hasDelay {
		delay = j.q.cfg.backoff(rec.Attempt)
	}
	rec.RunAtMs = time.Now().Add(max(delay, 0)).UnixMilli()
	return j.finish(ctx, "nacking", client.QueuePut{Key: j.q.jobsPrefix() + rec.order(), Value: rec.encode()})
}

func q2dead(q *Queue, rec *jobRecord) client.QueuePut {
	rec.DeadMs = time.Now().UnixMilli()
	return client.QueuePut{Key: q.deadPrefix() + rec.ID, Value: rec.encode()}
}

// Cancel gives the claim back without using an attempt: the job is
// visible again at once (a worker shutting down, say). ErrClaimExpired if
// the claim is no longer current.
func (j *Job) Cancel(ctx context.Context) error {
	rec := j.rec
	rec.Attempt = max(rec.Attempt-1, 0)
	// The job keeps its key (and so its place); only the marker goes,
	// and the lock with Release.
	for n := 0; ; n++ {
		res, err := j.q.c.Txn(ctx).If(client.LockHeld(j.Handle), client.Exists(j.key)).
			Then(client.OpPut(j.key, rec.encode(), client.WithLock(j.Handle)), client.OpDelete(j.q.claimsPrefix()+rec.order())).Commit()
		if err == nil && !res.Succeeded || errors.Is(err, client.ErrLocked) {
			return fmt.Errorf("cancelling job %s: %w", j.ID, ErrClaimExpired)
		}
		if err == nil {
			break
		}
		if !retryable(err) || n >= maxWriteRetries || ctx.Err() != nil {
			return err
		}
	}
	if err := j.q.c.Release(ctx, j.Handle); err != nil && !errors.Is(err, client.ErrLocked) {
		return err
	}
	return nil
}

// TryClaim claims the next visible job without waiting; ErrNoJob if there
// is none (or the queue is paused).
func (q *Queue) TryClaim(ctx context.Context) (*Job, error) {
	if j, res, err := q.serverClaim(ctx); err != nil || j != nil {
		return j, err
	} else if res != nil {
		return nil, ErrNoJob
	}
	sc, err := q.scan(ctx)
	if err != nil {
		return nil, err
	}
	if !sc.paused {
		if j, _, err := q.claimFrom(ctx, sc); err != nil || j != nil {
			return j, err
		}
	}
	return nil, ErrNoJob
}

// Claim waits until a job is visible and claims it, or ctx ends. It is
// woken by a watch on the queue's keys (a new job, an expired claim, a
// resume) and by a timer for the earliest scheduled job; it never polls.
// Consumers that wait together are woken together and each takes the
// first job it wins, so a burst of jobs spreads over them.
func (q *Queue) Claim(ctx context.Context) (*Job, error) {
	jobs, err := q.claimN(ctx, 1)
	if err != nil {
		return nil, err
	}
	return jobs[0], nil
}

// claimN is Claim for up to n jobs (ClaimBatch): it returns at least one.
func (q *Queue) claimN(ctx context.Context, n int) ([]*Job, error) {
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var w *client.Watch
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var (
			wake         time.Time
			heldUnmarked bool
		)
		js, res, err := q.serverClaimN(ctx, n)
		if err != nil || len(js) > 0 {
			return js, err
		}
		if res != nil {
			wake, heldUnmarked = res.NextRunAt, res.LockedUnmarked > 0
		} else {
			sc, err := q.scan(ctx)
			if err != nil {
				return nil, err
			}
			wake = sc.nextRunAt
			if !sc.paused {
				j, held, err := q.claimFrom(ctx, sc)
				if err != nil {
					return nil, err
				}
				if j != nil {
					return []*Job{j}, nil
				}
				heldUnmarked = held
			}
		}
		{
			if heldUnmarked {
				// Locked but not marked: a claimer is between its two
				// steps, or died there. Its marker's put wakes us in the
				// first case; its lock's expiry, within the visibility
				// timeout, does not, so set a timer.
				if t := time.Now().Add(q.cfg.visibility); wake.IsZero() || t.Before(wake) {
					wake = t
				}
			}
		}
		if w == nil {
			// Watch from now, then scan again: a change after the watch
			// began arrives on it, one before is in the second scan. (A
			// watch started after the scan's revision would trust that
			// revision; a read-only txn's header revision is filled in at
			// response time and may be later than what the read saw.)
			if w, err = q.c.WatchPrefix(wctx, q.prefix); err != nil {
				return nil, err
			}
			continue
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		if !wake.IsZero() {
			timer.Reset(max(time.Until(wake), time.Millisecond))
		} else {
			timer.Reset(time.Hour) // nothing scheduled; the watch wakes us
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-timer.C:
				timer.Reset(time.Hour)
				break wait
			case b, ok := <-w.Events():
				if !ok {
					if err := w.Err(); err != nil && !errors.Is(err, client.ErrCompacted) {
						return nil, err
					}
					w = nil // compacted past us: rescan and watch afresh
					break wait
				}
				if q.wakes(b) {
					break wait
				}
			}
		}
	}
}

// wakes says whether a batch of changes may have made a job claimable: a
// job put, a claim marker deleted without its job, a resume.
func (q *Queue) wakes(b client.WatchBatch) bool {
	// A claim puts its job and its marker in one revision, an ack deletes
	// both: neither frees a job.
	deletedJobs, claims := map[string]bool{}, map[string]bool{}
	for _, e := range b.Events {
		switch {
		case e.Type == client.EventDelete && strings.HasPrefix(e.KV.Key, q.jobsPrefix()):
			deletedJobs[strings.TrimPrefix(e.KV.Key, q.jobsPrefix())] = true
		case e.Type == client.EventPut && strings.HasPrefix(e.KV.Key, q.claimsPrefix()):
			claims[strings.TrimPrefix(e.KV.Key, q.claimsPrefix())] = true
		}
	}
	for _, e := range b.Events {
		k := e.KV.Key
		switch {
		case e.Type == client.EventPut && strings.HasPrefix(k, q.jobsPrefix()) && !claims[strings.TrimPrefix(k, q.jobsPrefix())]:
			return true
		case e.Type == client.EventDelete && strings.HasPrefix(k, q.claimsPrefix()) && !deletedJobs[strings.TrimPrefix(k, q.claimsPrefix())]:
			return true
		case e.Type == client.EventDelete && k == q.pausedKey():
			return true
		}
	}
	return false
}

type scanResult struct {
	rev        int64
	paused     bool
	candidates []orderKey // visible and unmarked, in claim order
	nextRunAt  time.Time  // earliest scheduled unmarked job, zero if none
}

const scanPage = 512

// scan reads the queue's keys (no values) and lists the visible,
// unclaimed jobs in claim order, up to a page of them. It uses plain
// linearizable reads (no raft entry), jobs first and markers second: a
// job claimed between the two reads looks claimed and is skipped, one
// whose claim ended or that was acked between them looks visible, and
// tryClaim sorts that out under the lock.
func (q *Queue) scan(ctx context.Context) (*scanResult, error) {
	jp, cp := q.jobsPrefix(), q.claimsPrefix()
	var marks *client.RangeResult
	var merr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		marks, merr = q.c.List(ctx, cp, client.WithKeysOnly())
	}()
	page, err := q.c.List(ctx, jp, client.WithKeysOnly(), client.WithLimit(scanPage))
	<-done
	if err == nil {
		err = merr
	}
	if err != nil {
		return nil, err
	}
	sc := &scanResult{rev: page.Revision}
	claimed := make(map[string]bool, len(marks.KVs))
	for _, kv := range marks.KVs {
		claimed[strings.TrimPrefix(kv.Key, cp)] = true
	}
	sc.paused = claimed["paused"]
	nowMs := time.Now().UnixMilli()
	for {
		for _, kv := range page.KVs {
			k, ok := parseOrder(strings.TrimPrefix(kv.Key, jp))
			if !ok || claimed[k.order] {
				continue
			}
			if k.runAtMs > nowMs {
				if t := time.UnixMilli(k.runAtMs); sc.nextRunAt.IsZero() || t.Before(sc.nextRunAt) {
					sc.nextRunAt = t
				}
				continue
			}
			sc.candidates = append(sc.candidates, k)
		}
		if len(sc.candidates) > 0 || !page.More || len(page.KVs) == 0 {
			return sc, nil
		}
		last := page.KVs[len(page.KVs)-1].Key
		page, err = q.c.Range(ctx, last+"\x00", client.WithRange(prefixEnd(jp)), client.WithKeysOnly(), client.WithLimit(scanPage), client.WithRev(sc.rev))
		if err != nil {
			return nil, err
		}
	}
}

// maxSpread caps how many of the first visible jobs competing consumers
// spread over.
const maxSpread = 16

// spread orders the candidates for trying. Each attempt is a lock
// acquisition (a raft entry), so consumers woken together should not all
// try the same job first: a consumer that has been losing races starts
// at a random one of the first width jobs, width growing with the races
// it lost lately. A lone consumer never loses one, so it claims in exact
// queue order.
func (sc *scanResult) spread(width int) {
	n := min(len(sc.candidates), width)
	if n <= 1 {
		return
	}
	head := sc.candidates[:n]
	r := mrand.IntN(n)
	rot := append(append([]orderKey{}, head[r:]...), head[:r]...)
	copy(head, rot)
}

// claimFrom tries sc's candidates in turn and keeps the contention
// estimate that spread uses. It returns the job, or nil and whether some
// job was locked without a claim marker.
func (q *Queue) claimFrom(ctx context.Context, sc *scanResult) (*Job, bool, error) {
	sc.spread(int(q.contention.Load()) + 1)
	heldUnmarked := false
	for i, k := range sc.candidates {
		j, held, err := q.tryClaim(ctx, k)
		if err != nil {
			return nil, false, err
		}
		if j != nil {
			if i == 0 {
				if c := q.contention.Load(); c > 0 {
					q.contention.CompareAndSwap(c, c-1)
				}
			}
			return j, false, nil
		}
		if c := q.contention.Load(); c < maxSpread {
			q.contention.CompareAndSwap(c, c+1)
		}
		heldUnmarked = heldUnmarked || held
	}
	return nil, heldUnmarked, nil
}

func prefixEnd(p string) string {
	b := []byte(p)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return "\x00"
}

// tryClaim claims job k if it can win it: it takes the lock on the job's
// key (on a lease of the visibility timeout), then, under the lock, counts
// the attempt and puts the claim marker on the lock's lease. A job that
// has used its attempts (its last claim expired) is dead-lettered instead.
// It returns nil, false when another consumer has the job; nil, true when
// the job is locked without a marker.
func (q *Queue) tryClaim(ctx context.Context, k orderKey) (*Job, bool, error) {
	key := q.jobsPrefix() + k.order
	// Read the job while acquiring its lock (one round trip, not two).
	// The read may predate the last write of the previous claim; the
	// claim's txn compares the job's mod revision and, if it moved, reads
	// it again, now under our lock.
	var kv *client.KeyValue
	var gerr error
	read := make(chan struct{})
	go func() {
		defer close(read)
		kv, gerr = q.c.Get(ctx, key)
	}()
	lr, err := q.c.TryAcquire(ctx, key, q.cfg.visibility)
	<-read
	if err != nil {
		return nil, false, err
	}
	if !lr.Acquired {
		return nil, true, nil
	}
	return q.claimLocked(ctx, key, k, lr.Handle, kv, gerr, time.Now())
}

// serverClaim claims through the server's Queue service. It returns the
// job, or nil and what the server found (no job visible: when to look
// again), or nil, nil when the server cannot help (no such service, or
// it gave up after its scan limit): then the caller scans.
func (q *Queue) serverClaim(ctx context.Context) (*Job, *client.QueueClaimResult, error) {
	js, res, err := q.serverClaimN(ctx, 1)
	if len(js) > 0 {
		return js[0], nil, err
	}
	return nil, res, err
}

// serverClaimN is serverClaim for up to n jobs in one command (the
// server's batch claim when n > 1 and the client has it).
func (q *Queue) serverClaimN(ctx context.Context, n int) ([]*Job, *client.QueueClaimResult, error) {
	cl, ok := q.c.(QueueClaimer)
	if !ok || q.noServerClaim.Load() {
		return nil, nil, nil
	}
	bc, batch := q.c.(QueueBatchClaimer)
	for try := 0; ; try++ {
		start := time.Now()
		var (
			res *client.QueueClaimResult
			err error
		)
		if batch && n > 1 {
			res, err = bc.QueueClaimBatch(ctx, q.prefix, q.cfg.visibility, n)
		} else {
			res, err = cl.QueueClaim(ctx, q.prefix, q.cfg.visibility)
		}
		if status.Code(errors.Unwrap(err)) == codes.Unimplemented || status.Code(err) == codes.Unimplemented {
			q.noServerClaim.Store(true)
			return nil, nil, nil
		}
		if err != nil {
			return nil, nil, err
		}
		if !res.Found {
			if res.Truncated {
				return nil, nil, nil
			}
			return nil, res, nil
		}
		out, err := q.takeClaimed(ctx, res, start)
		if err != nil || len(out) > 0 {
			return out, nil, err
		}
		// Every job was dead-lettered, vanished or the queue paused under
		// our lock: claim the next ones.
		if try >= maxWriteRetries || ctx.Err() != nil {
			return nil, nil, nil
		}
	}
}

// takeClaimed turns the jobs of a server claim that found some into
// Jobs: those dead-lettered or vanished meanwhile are left out; after an
// error the jobs not yet looked at are released and those taken are
// returned (the error only if none was).
func (q *Queue) takeClaimed(ctx context.Context, res *client.QueueClaimResult, start time.Time) ([]*Job, error) {
	var out []*Job
	claimed := append([]client.QueueClaimedJob{{Job: res.Job, Handle: res.Handle, Marked: res.Marked}}, res.More...)
	for i, c := range claimed {
		j, err := q.serverClaimed(ctx, c, start)
		if err != nil {
			for _, rest := range claimed[i+1:] {
				go (&Job{q: q, Handle: rest.Handle}).release()
			}
			if len(out) > 0 {
				return out, nil
			}
			return nil, err
		}
		if j != nil {
			out = append(out, j)
		}
	}
	return out, nil
}

// serverClaimed turns one job the server claimed into a Job: nil if it
// was dead-lettered (it used its attempts), vanished, or the queue was
// paused under our lock.
func (q *Queue) serverClaimed(ctx context.Context, c client.QueueClaimedJob, start time.Time) (*Job, error) {
	k, ok := parseOrder(strings.TrimPrefix(c.Job.Key, q.jobsPrefix()))
	if !ok {
		go (&Job{q: q, Handle: c.Handle}).release()
		return nil, nil
	}
	if c.Marked {
		if rec, err := decodeRecord(c.Job); err == nil {
			return q.newJob(c.Job.Key, rec, c.Handle, start), nil
		}
	}
	// Not marked: the job used its attempts (claimLocked dead-letters it)
	// or the server did not mark it; finish the claim here.
	j, _, err := q.claimLocked(ctx, c.Job.Key, k, c.Handle, c.Job, nil, start)
	return j, err
}

// newJob is the claimed job rec at key under claim h, taken at start.
func (q *Queue) newJob(key string, rec *jobRecord, h client.LockHandle, start time.Time) *Job {
	return &Job{q: q, key: key, rec: *rec, ID: rec.ID, Payload: rec.Payload, Priority: rec.Priority,
		RunAt: time.UnixMilli(rec.RunAtMs), EnqueuedAt: time.Unix(0, idNanos(rec.ID)), Attempt: rec.Attempt,
		MaxAttempts: rec.MaxAttempts, LastError: rec.LastError, Handle: h, Deadline: start.Add(q.cfg.visibility)}
}

// claimLocked finishes a claim of job k once its lock h is ours: under
// the lock it counts the attempt and puts the claim marker on the lock's
// lease (or dead-letters a job that used its attempts). kv is a read of
// the job, possibly older than the lock.
func (q *Queue) claimLocked(ctx context.Context, key string, k orderKey, h client.LockHandle, kv *client.KeyValue, gerr error, start time.Time) (*Job, bool, error) {
	giveUp := func() { go (&Job{q: q, Handle: h}).release() }
	for n := 0; ; n++ {
		if errors.Is(gerr, client.ErrNotFound) {
			giveUp() // acked or moved since the scan
			return nil, false, nil
		}
		if gerr != nil {
			giveUp()
			return nil, false, gerr
		}
		rec, err := decodeRecord(kv)
		if err != nil {
			giveUp()
			return nil, false, err
		}
		if rec.Attempt >= rec.MaxAttempts {
			// Its last claim expired without an Ack or Nack.
			rec.LastError = fmt.Sprintf("claim of attempt %d expired (visibility timeout %v); %s", rec.Attempt, q.cfg.visibility, rec.LastError)
			j := &Job{q: q, key: key, rec: *rec, ID: rec.ID, Handle: h}
			if err := j.finish(ctx, "dead-lettering", q2dead(q, rec)); err != nil && !errors.Is(err, ErrClaimExpired) {
				return nil, false, err
			}
			return nil, false, nil
		}
		rec.Attempt++
		marker, _ := json.Marshal(map[string]any{"token": h.Token, "owner": h.Owner, "attempt": rec.Attempt})
		res, err := q.c.Txn(ctx).If(client.LockHeld(h), client.ModRevision(key).Equal(kv.ModRevision), client.Missing(q.pausedKey())).
			Then(client.OpPut(key, rec.encode(), client.WithLock(h)), client.OpPut(q.claimsPrefix()+k.order, marker, client.WithLease(h.Lease))).
			Else(client.OpGet(key, client.WithLock(h)), client.OpGet(q.pausedKey(), client.WithCountOnly())).
			Commit()
		switch {
		case err == nil && res.Succeeded:
			return q.newJob(key, rec, h, start), false, nil
		case err == nil:
			// The Else reads fail the txn with ErrLocked if our lock is
			// gone, so here it is ours: the job moved, vanished, or the
			// queue is paused.
			if res.Responses[1].Get.Count > 0 || len(res.Responses[0].Get.KVs) == 0 || n >= maxWriteRetries {
				giveUp()
				return nil, false, nil
			}
			kv, gerr = res.Responses[0].Get.KVs[0], nil // read under our lock: current
		case errors.Is(err, client.ErrLocked) || errors.Is(err, client.ErrLeaseNotFound):
			giveUp() // our claim already expired
			return nil, false, nil
		case retryable(err) && n < maxWriteRetries && ctx.Err() == nil:
			// Did it apply? Then the marker carries our token.
			if m, merr := q.c.Get(ctx, q.claimsPrefix()+k.order); merr == nil && string(m.Value) == string(marker) {
				return q.newJob(key, rec, h, start), false, nil
			}
			kv, gerr = q.c.Get(ctx, key)
		default:
			giveUp()
			return nil, false, err
		}
	}
}

// Pause stops Claim from handing out jobs until Resume; claims already
// made are unaffected.
func (q *Queue) Pause(ctx context.Context) error {
	_, err := q.c.Put(ctx, q.pausedKey(), []byte("1"))
	return err
}

// Resume undoes Pause; waiting consumers wake.
func (q *Queue) Resume(ctx context.Context) error {
	_, err := q.c.Delete(ctx, q.pausedKey())
	return err
}

// QueueStats is a snapshot of a queue at one revision.
type QueueStats struct {
	Visible   int64 // claimable now
	Claimed   int64 // held by a consumer
	Scheduled int64 // run-at in the future (or backing off after a Nack)
	Dead      int64 // in the dead-letter list
	Paused    bool
	// OldestAge is how long the oldest visible job has waited since it
	// was enqueued (0 when none is visible).
	OldestAge time.Duration
	Revision  int64
}

// Stats counts the queue's jobs by state, at one revision.
func (q *Queue) Stats(ctx context.Context) (*QueueStats, error) {
	jp, cp := q.jobsPrefix(), q.claimsPrefix()
	res, err := q.c.Txn(ctx).Then(
		client.OpGet(q.pausedKey(), client.WithCountOnly()),
		client.OpGet(cp, client.WithPrefix(), client.WithKeysOnly()),
		client.OpGet(jp, client.WithPrefix(), client.WithKeysOnly()),
		client.OpGet(q.deadPrefix(), client.WithPrefix(), client.WithCountOnly()),
	).Commit()
	if err != nil {
		return nil, err
	}
	st := &QueueStats{Revision: res.Revision, Paused: res.Responses[0].Get.Count > 0, Dead: res.Responses[3].Get.Count}
	// (the paused key sits among the markers but matches no job)
	claimed := map[string]bool{}
	for _, kv := range res.Responses[1].Get.KVs {
		claimed[strings.TrimPrefix(kv.Key, cp)] = true
	}
	now := time.Now()
	oldest := int64(math.MaxInt64)
	for _, kv := range res.Responses[2].Get.KVs {
		k, ok := parseOrder(strings.TrimPrefix(kv.Key, jp))
		switch {
		case !ok:
		case claimed[k.order]:
			st.Claimed++
		case k.runAtMs > now.UnixMilli():
			st.Scheduled++
		default:
			st.Visible++
			oldest = min(oldest, k.enqNanos)
		}
	}
	if st.Visible > 0 {
		st.OldestAge = max(now.Sub(time.Unix(0, oldest)), 0)
	}
	return st, nil
}

// List returns the waiting jobs (visible, scheduled and claimed) in claim
// order, at most limit of them (0: all).
func (q *Queue) List(ctx context.Context, limit int) ([]JobInfo, error) {
	jp, cp := q.jobsPrefix(), q.claimsPrefix()
	res, err := q.c.Txn(ctx).Then(
		client.OpGet(cp, client.WithPrefix(), client.WithKeysOnly()),
		client.OpGet(jp, client.WithPrefix(), client.WithLimit(int64(limit))),
	).Commit()
	if err != nil {
		return nil, err
	}
	claimed := map[string]bool{}
	for _, kv := range res.Responses[0].Get.KVs {
		claimed[strings.TrimPrefix(kv.Key, cp)] = true
	}
	nowMs := time.Now().UnixMilli()
	var out []JobInfo
	for _, kv := range res.Responses[1].Get.KVs {
		rec, err := decodeRecord(kv)
		if err != nil {
			return nil, err
		}
		state := "visible"
		if claimed[strings.TrimPrefix(kv.Key, jp)] {
			state = "claimed"
		} else if rec.RunAtMs > nowMs {
			state = "scheduled"
		}
		out = append(out, rec.info(state))
	}
	return out, nil
}

// Dead lists the dead-letter list, oldest job first, at most limit (0:
// all).
func (q *Queue) Dead(ctx context.Context, limit int) ([]JobInfo, error) {
	r, err := q.c.List(ctx, q.deadPrefix(), client.WithLimit(int64(limit)))
	if err != nil {
		return nil, err
	}
	var out []JobInfo
	for _, kv := range r.KVs {
		rec, err := decodeRecord(kv)
		if err != nil {
			return nil, err
		}
		out = append(out, rec.info("dead"))
	}
	return out, nil
}

// InspectDead returns one dead-lettered job; client.ErrNotFound if id is
// not in the dead-letter list.
func (q *Queue) InspectDead(ctx context.Context, id string) (*JobInfo, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	kv, err := q.c.Get(ctx, q.deadPrefix()+id)
	if err != nil {
		return nil, err
	}
	rec, err := decodeRecord(kv)
	if err != nil {
		return nil, err
	}
	info := rec.info("dead")
	return &info, nil
}

func checkID(id string) error {
	if len(id) != idLen {
		return invalid("job id %.40q: an id is %d hex digits", id, idLen)
	}
	if _, err := hex.DecodeString(id); err != nil {
		return invalid("job id %.40q: an id is %d hex digits", id, idLen)
	}
	return nil
}

// Requeue moves a dead-lettered job back into the queue, visible now with
// its attempts reset; client.ErrNotFound if it is not in the dead-letter
// list.
func (q *Queue) Requeue(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	dk := q.deadPrefix() + id
	kv, err := q.c.Get(ctx, dk)
	if err != nil {
		return err
	}
	rec, err := decodeRecord(kv)
	if err != nil {
		return err
	}
	rec.Attempt, rec.DeadMs = 0, 0
	rec.RunAtMs = time.Now().UnixMilli()
	res, err := q.c.Txn(ctx).If(client.ModRevision(dk).Equal(kv.ModRevision)).
		Then(client.OpDelete(dk), client.OpPut(q.jobsPrefix()+rec.order(), rec.encode())).Commit()
	if err != nil {
		return err
	}
	if !res.Succeeded {
		return &client.Error{Kind: client.ErrNotFound, Msg: fmt.Sprintf("job %s left the dead-letter list meanwhile", id)}
	}
	return nil
}

// Purge deletes dead-lettered jobs: the one with id, or all of them when
// id is "". It returns how many it deleted.
func (q *Queue) Purge(ctx context.Context, id string) (int64, error) {
	key, opts := q.deadPrefix(), []client.OpOption{client.WithPrefix()}
	if id != "" {
		if err := checkID(id); err != nil {
			return 0, err
		}
		key, opts = key+id, nil
	}
	r, err := q.c.Delete(ctx, key, opts...)
	if err != nil {
		return 0, err
	}
	return r.Deleted, nil
}

// ClaimString returns the claim's text form, to hand the job to another process
// (the CLI prints it); Queue.ResumeClaim turns it back into a Job. It is
// the claim's lock handle.
func (j *Job) ClaimString() string { return j.Handle.String() }

// ResumeClaim rebuilds a claimed Job from its text form (Job.ClaimString), for
// another process to Ack, Nack, Extend or write WithClaim. The job is read
// from the store; ErrClaimExpired if the claim is no longer current,
// client.ErrInvalidInput if the text is not a claim on this queue.
func (q *Queue) ResumeClaim(ctx context.Context, claim string) (*Job, error) {
	h, err := client.ParseLockHandle(claim)
	if err != nil {
		return nil, err
	}
	order, ok := strings.CutPrefix(h.Key, q.jobsPrefix())
	if _, valid := parseOrder(order); !ok || !valid {
		return nil, invalid("claim on %.60q is not a claim on queue %q", h.Key, q.name)
	}
	j := &Job{q: q, key: h.Key, Handle: h}
	held, err := j.Claimed(ctx)
	if err != nil {
		return nil, err
	}
	kv, err := q.c.Get(ctx, h.Key)
	if errors.Is(err, client.ErrNotFound) || (err == nil && !held) {
		return nil, fmt.Errorf("queue %q, claim %d: %w", q.name, h.Token, ErrClaimExpired)
	}
	if err != nil {
		return nil, err
	}
	rec, err := decodeRecord(kv)
	if err != nil {
		return nil, err
	}
	j.rec = *rec
	j.ID, j.Payload, j.Priority, j.Attempt, j.MaxAttempts, j.LastError = rec.ID, rec.Payload, rec.Priority, rec.Attempt, rec.MaxAttempts, rec.LastError
	j.RunAt, j.EnqueuedAt = time.UnixMilli(rec.RunAtMs), time.Unix(0, idNanos(rec.ID))
	return j, nil
}
