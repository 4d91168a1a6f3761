package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
)

// QueueStream is the Recorder stream of the queue workload.
const QueueStream = "queue"

// QueueEvent is one queue operation of the workload, or (Kind "final")
// the queue's state read after the faults.
type QueueEvent struct {
	Kind    string // enqueue, claim, ack, final
	Worker  int
	Payload string
	Token   int64
	Call    int64
	Ret     int64
	Outcome string // ok, expired, unknown, failed
	// Paused: the consumer slept past its visibility timeout before this
	// ack.
	Paused bool
	// final: the payloads still waiting and in the dead-letter list.
	Waiting, Dead []string
	Err           string
}

// QueueWorkload runs producers that enqueue uniquely named jobs (with the
// name as idempotency key) and consumers that claim them and mostly ack,
// sometimes nack, and sometimes pause past their visibility timeout
// before acking, while faults run. Final drains the queue and reads its
// state.
type QueueWorkload struct {
	Clients   []*client.Client
	Seed      int64
	OpTimeout time.Duration
	// Visibility is the claims' visibility timeout (default 2s).
	Visibility time.Duration

	mu       sync.Mutex
	enqueued []string
}

func (w *QueueWorkload) Name() string { return "queue" }

func (w *QueueWorkload) queue(c *client.Client) *recipe.Queue {
	if w.Visibility == 0 {
		w.Visibility = 2 * time.Second
	}
	q, _ := recipe.NewQueue(c, "chaos", recipe.WithVisibilityTimeout(w.Visibility),
		recipe.WithDefaultMaxAttempts(4), recipe.WithBackoff(func(int) time.Duration { return 100 * time.Millisecond }))
	return q
}

func queueOutcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, recipe.ErrClaimExpired), errors.Is(err, client.ErrLocked):
		return "expired"
	case maybeApplied(err):
		return "unknown"
	}
	return "failed"
}

func (w *QueueWorkload) Run(ctx context.Context, rec *Recorder, stats *Stats) {
	if w.OpTimeout == 0 {
		w.OpTimeout = time.Second
	}
	var wg sync.WaitGroup
	for i, c := range w.Clients {
		q := w.queue(c)
		wg.Add(2)
		go func() { defer wg.Done(); w.produce(ctx, i, q, rec, stats) }()
		go func() {
			defer wg.Done()
			w.consume(ctx, ctx, i, q, rand.New(rand.NewPCG(uint64(w.Seed), 0x71756575+uint64(i))), rec, stats)
		}()
	}
	wg.Wait()
}

// maxQueueBacklog bounds the jobs waiting or claimed: producers outrun
// consumers under faults (an enqueue is one entry, a job's claim and
// ack two round trips, plus pauses), and an unbounded backlog would make
// the final drain measure throughput instead of checking that nothing is
// stuck.
const maxQueueBacklog = 100

func (w *QueueWorkload) produce(ctx context.Context, id int, q *recipe.Queue, rec *Recorder, stats *Stats) {
	for n := 0; ctx.Err() == nil; n++ {
		if n%10 == 0 {
			for ctx.Err() == nil {
				sctx, cancel := context.WithTimeout(ctx, w.OpTimeout)
				st, err := q.Stats(sctx)
				cancel()
				if err == nil && st.Visible+st.Claimed+st.Scheduled < maxQueueBacklog {
					break
				}
				sleepCtx(ctx, 200*time.Millisecond)
			}
		}
		payload := fmt.Sprintf("p%d-%d", id, n)
		w.mu.Lock()
		w.enqueued = append(w.enqueued, payload)
		w.mu.Unlock()
		// Retried until it certainly applied: the idempotency key makes
		// that safe. One left unknown when the run ends may or may not
		// exist.
		for ctx.Err() == nil {
			octx, cancel := context.WithTimeout(ctx, w.OpTimeout)
			call := rec.Now()
			_, err := q.Enqueue(octx, []byte(payload), recipe.WithIdempotencyKey(payload))
			cancel()
			o := queueOutcome(err)
			stats.Op(map[string]string{"ok": "ok", "unknown": "unknown"}[o])
			rec.Append(QueueStream, QueueEvent{Kind: "enqueue", Worker: id, Payload: payload, Call: call, Ret: rec.Now(), Outcome: o})
			if err == nil {
				break
			}
			sleepCtx(ctx, 50*time.Millisecond)
		}
		sleepCtx(ctx, 30*time.Millisecond)
	}
}

// consume claims until ctx ends; opCtx bounds each operation's waits
// (the run's ctx, or Final's).
func (w *QueueWorkload) consume(ctx, opCtx context.Context, id int, q *recipe.Queue, rng *rand.Rand, rec *Recorder, stats *Stats) {
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		j, err := q.Claim(cctx)
		cancel()
		if err != nil {
			sleepCtx(ctx, 50*time.Millisecond)
			continue
		}
		rec.Append(QueueStream, QueueEvent{Kind: "claim", Worker: id, Payload: string(j.Payload), Token: j.Token(), Ret: rec.Now(), Outcome: "ok"})
		paused := false
		switch r := rng.IntN(10); {
		case r == 0:
			octx, cancel := context.WithTimeout(opCtx, w.OpTimeout)
			_ = j.Nack(octx, errors.New("chaos nack"))
			cancel()
			continue
		case r == 1:
			paused = true
			if !sleepCtx(ctx, w.Visibility+time.Duration(200+rng.IntN(800))*time.Millisecond) {
				return
			}
		}
		octx, cancel := context.WithTimeout(opCtx, w.OpTimeout)
		call := rec.Now()
		err = j.Ack(octx)
		cancel()
		o := queueOutcome(err)
		stats.Op(map[string]string{"ok": "ok", "expired": "ok", "unknown": "unknown", "failed": "failed"}[o])
		rec.Append(QueueStream, QueueEvent{Kind: "ack", Worker: id, Payload: string(j.Payload), Token: j.Token(), Call: call, Ret: rec.Now(), Outcome: o, Paused: paused})
	}
}

// Final drains the queue with healthy consumers (no pauses, no nacks),
// then reads what is left waiting and what was dead-lettered.
func (w *QueueWorkload) Final(ctx context.Context, rec *Recorder, stats *Stats) {
	if len(w.Clients) == 0 {
		return
	}
	q := w.queue(w.Clients[0])
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for dctx.Err() == nil {
		st, err := q.Stats(dctx)
		if err == nil && st.Visible+st.Claimed+st.Scheduled == 0 {
			break
		}
		cctx, ccancel := context.WithTimeout(dctx, w.Visibility+2*time.Second)
		j, err := q.Claim(cctx)
		ccancel()
		if err != nil {
			continue
		}
		rec.Append(QueueStream, QueueEvent{Kind: "claim", Worker: -1, Payload: string(j.Payload), Token: j.Token(), Ret: rec.Now(), Outcome: "ok"})
		call := rec.Now()
		err = j.Ack(dctx)
		rec.Append(QueueStream, QueueEvent{Kind: "ack", Worker: -1, Payload: string(j.Payload), Token: j.Token(), Call: call, Ret: rec.Now(), Outcome: queueOutcome(err)})
	}
	fin := QueueEvent{Kind: "final"}
	waiting, err := q.List(ctx, 0)
	if err == nil {
		for _, j := range waiting {
			fin.Waiting = append(fin.Waiting, string(j.Payload))
		}
		var dead []recipe.JobInfo
		dead, err = q.Dead(ctx, 0)
		for _, j := range dead {
			fin.Dead = append(fin.Dead, string(j.Payload))
		}
	}
	if err != nil {
		fin.Err = err.Error()
	}
	rec.Append(QueueStream, fin)
}

// QueueSafety checks the queue workload by the queue's final state:
// every job whose enqueue was acknowledged was acked exactly once or
// dead-lettered (never both, never neither: none lost); no job is left
// waiting after the drain; and no ack was acknowledged from a claim that
// had already been superseded by a later claim of the same job (an ack by
// an expired claim).
type QueueSafety struct{}

func (QueueSafety) Name() string { return "queue-safety" }

func (s QueueSafety) Check(_ context.Context, r *Run) []Anomaly {
	var out []Anomaly
	bad := func(format string, args ...any) {
		if len(out) < 20 {
			out = append(out, Anomaly{Checker: s.Name(), Msg: fmt.Sprintf(format, args...)})
		}
	}
	enqOK := map[string]bool{}
	enqAny := map[string]bool{}
	ackOK := map[string]int{}
	ackUnknown := map[string]int{}
	// claims[p]: the tokens of p's claims and when they were returned.
	type claim struct {
		token int64
		ret   int64
	}
	claims := map[string][]claim{}
	var acks []QueueEvent
	var fin *QueueEvent
	// trail[p]: what happened to job p, for the anomaly's message.
	trail := map[string][]string{}
	for _, e := range r.History.Stream(QueueStream) {
		e := e.(QueueEvent)
		if e.Kind != "final" {
			trail[e.Payload] = append(trail[e.Payload], fmt.Sprintf("%s(w%d tok %d %s%s)", e.Kind, e.Worker, e.Token, e.Outcome, map[bool]string{true: " paused"}[e.Paused]))
		}
		switch e.Kind {
		case "enqueue":
			enqAny[e.Payload] = true
			if e.Outcome == "ok" {
				enqOK[e.Payload] = true
			}
		case "claim":
			claims[e.Payload] = append(claims[e.Payload], claim{e.Token, e.Ret})
		case "ack":
			acks = append(acks, e)
			switch e.Outcome {
			case "ok":
				ackOK[e.Payload]++
			case "unknown":
				ackUnknown[e.Payload]++
			}
		case "final":
			fin = &e
		}
	}
	if len(enqAny) == 0 {
		return nil
	}
	for _, a := range acks {
		if a.Outcome != "ok" {
			continue
		}
		for _, c := range claims[a.Payload] {
			if c.token > a.Token && c.ret < a.Call {
				bad("job %s: ack by claim %d acknowledged although claim %d of the job was made before the ack was sent (an expired claim acked)", a.Payload, a.Token, c.token)
				break
			}
		}
	}
	if r.Stats != nil {
		refused, paused := 0, 0
		for _, a := range acks {
			if a.Outcome == "expired" {
				refused++
			}
			if a.Paused {
				paused++
			}
		}
		r.Stats.Check("queue-jobs", len(enqAny))
		r.Stats.Check("queue-acked", len(ackOK))
		r.Stats.Check("queue-paused-acks", paused)
		r.Stats.Check("queue-acks-refused", refused)
	}
	if fin == nil || fin.Err != "" {
		bad("the queue's final state could not be read: %v", fin)
		return out
	}
	waiting, dead := map[string]bool{}, map[string]int{}
	for _, p := range fin.Waiting {
		waiting[p] = true
		bad("job %s still waiting after the drain", p)
	}
	for _, p := range fin.Dead {
		dead[p]++
	}
	for p := range enqAny {
		acked, unknown, d := ackOK[p], ackUnknown[p], dead[p]
		switch {
		case acked > 1:
			bad("job %s acked %d times", p, acked)
		case d > 1 || (d == 1 && acked > 0):
			bad("job %s acked %d times and dead-lettered %d times", p, acked, d)
		case enqOK[p] && acked == 0 && d == 0 && unknown == 0 && !waiting[p]:
			bad("job %s lost: enqueued, never acked, not dead-lettered, not waiting; its events: %s", p, strings.Join(trail[p], " "))
		}
	}
	return out
}
