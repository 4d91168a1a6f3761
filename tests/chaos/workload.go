package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/dkv-io/dkv/client"
)

// Workload drives one kind of traffic during a run and records it.
type Workload interface {
	Name() string
	// Run issues operations until ctx ends.
	Run(ctx context.Context, rec *Recorder, stats *Stats)
	// Final runs after faults are healed, before the checkers: reads
	// whose results the checkers need (they are recorded like any other
	// operation).
	Final(ctx context.Context, rec *Recorder, stats *Stats)
}

// KVWorkload runs concurrent clients doing gets, puts, deletes, CAS
// transactions and bounded counter adds over a small set of keys, plus
// ledger puts (unique keys, for the durability check).
//
// Keys rotate every Window: each window's operations touch only that
// window's keys, so each window is an independent history, small enough
// for porcupine to check exhaustively.
type KVWorkload struct {
	// Clients are the workers; each should be pinned to one member so
	// some of them always talk to a partitioned or lagging node.
	Clients   []client.KV
	Seed      int64
	Registers int           // register keys per window (default 4)
	Counters  int           // counter keys per window (default 2)
	Window    time.Duration // default 4s
	OpTimeout time.Duration // default 1s
	// CounterMin and CounterMax bound every counter (default 0, 10).
	CounterMin, CounterMax int64

	mu   sync.Mutex
	keys map[string]bool
}

func (w *KVWorkload) defaults() {
	if w.Registers == 0 {
		w.Registers = 4
	}
	if w.Counters == 0 {
		w.Counters = 2
	}
	if w.Window == 0 {
		w.Window = 4 * time.Second
	}
	if w.OpTimeout == 0 {
		w.OpTimeout = time.Second
	}
	if w.CounterMax == 0 {
		w.CounterMax = 10
	}
}

func (w *KVWorkload) Name() string { return "kv" }

func (w *KVWorkload) touch(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.keys == nil {
		w.keys = map[string]bool{}
	}
	w.keys[key] = true
}

// Run implements Workload.
func (w *KVWorkload) Run(ctx context.Context, rec *Recorder, stats *Stats) {
	w.defaults()
	start := time.Now()
	var wg sync.WaitGroup
	for i, c := range w.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.worker(ctx, i, c, rand.New(rand.NewPCG(uint64(w.Seed), uint64(i))), start, rec, stats)
		}()
	}
	wg.Wait()
}

func (w *KVWorkload) worker(ctx context.Context, id int, c client.KV, rng *rand.Rand, start time.Time, rec *Recorder, stats *Stats) {
	seen := map[string]string{} // last value this worker read per key
	for seq := 0; ctx.Err() == nil; seq++ {
		win := int(time.Since(start) / w.Window)
		val := fmt.Sprintf("c%d.%d", id, seq)
		p := rng.IntN(100)
		if p < 5 {
			w.ledger(ctx, c, fmt.Sprintf("ledger/c%d/%d", id, seq), val, rec, stats)
			continue
		}
		var in Input
		if p < 20 {
			in = Input{Kind: OpCounter, Key: fmt.Sprintf("w%d/c%d", win, rng.IntN(w.Counters)),
				Delta: []int64{-3, -2, -1, 1, 2, 3}[rng.IntN(6)], Min: w.CounterMin, Max: w.CounterMax}
		} else {
			key := fmt.Sprintf("w%d/r%d", win, rng.IntN(w.Registers))
			switch {
			case p < 55:
				in = Input{Kind: OpGet, Key: key}
			case p < 75:
				in = Input{Kind: OpPut, Key: key, Value: val}
			case p < 80:
				in = Input{Kind: OpDelete, Key: key}
			default:
				in = Input{Kind: OpCAS, Key: key, Value: val}
				if v, ok := seen[key]; ok && rng.IntN(4) > 0 {
					in.Expect = v
				} else {
					in.ExpectAbsent = true
				}
			}
		}
		in.Window = win
		w.touch(in.Key)
		out, ok := w.do(ctx, id, c, in, rec, stats)
		if ok && in.Kind == OpGet && out.Exists {
			seen[in.Key] = out.Value
		}
	}
}

// do runs one operation and records it; ok is false when it was left out
// of the history (a failed read, or a write certainly not applied).
func (w *KVWorkload) do(ctx context.Context, id int, c client.KV, in Input, rec *Recorder, stats *Stats) (Output, bool) {
	octx, cancel := context.WithTimeout(ctx, w.OpTimeout)
	defer cancel()
	call := rec.Now()
	var out Output
	var err error
	switch in.Kind {
	case OpGet:
		var kv *client.KeyValue
		kv, err = c.Get(octx, in.Key)
		if err == nil {
			out = Output{Exists: true, Value: string(kv.Value)}
		} else if errors.Is(err, client.ErrNotFound) {
			out, err = Output{}, nil
		}
	case OpPut:
		_, err = c.Put(octx, in.Key, []byte(in.Value))
	case OpDelete:
		var r *client.DeleteResult
		if r, err = c.Delete(octx, in.Key); err == nil {
			out.Deleted = r.Deleted
		}
	case OpCAS:
		cmp := client.Missing(in.Key)
		if !in.ExpectAbsent {
			cmp = client.Value(in.Key).Equal([]byte(in.Expect))
		}
		var r *client.TxnResult
		if r, err = c.Txn(octx).If(cmp).Then(client.OpPut(in.Key, []byte(in.Value))).Commit(); err == nil {
			out.OK = r.Succeeded
		}
	case OpCounter:
		var n int64
		n, err = c.Counter(octx, in.Key, in.Delta, client.WithMin(in.Min), client.WithMax(in.Max))
		switch {
		case err == nil:
			out = Output{OK: true, Value: strconv.FormatInt(n, 10)}
		case errors.Is(err, client.ErrConflict):
			out, err = Output{}, nil
		}
	}
	ret := rec.Now()
	if err != nil {
		if in.Kind == OpGet || !maybeApplied(err) {
			stats.Op("failed")
			if unexplained(err) {
				stats.Unexpect(in.Kind.String() + ": " + errKind(err))
			}
			return out, false
		}
		out.Unknown = true
		stats.Op("unknown")
	} else {
		stats.Op("ok")
	}
	rec.Record(id, in, call, out, ret)
	return out, true
}

func (w *KVWorkload) ledger(ctx context.Context, c client.KV, key, val string, rec *Recorder, stats *Stats) {
	octx, cancel := context.WithTimeout(ctx, w.OpTimeout)
	defer cancel()
	_, err := c.Put(octx, key, []byte(val), client.IfAbsent())
	switch {
	case err == nil:
		stats.Op("ok")
		rec.Append(LedgerStream, LedgerWrite{Key: key, Value: val, Acked: true})
	case maybeApplied(err):
		stats.Op("unknown")
		rec.Append(LedgerStream, LedgerWrite{Key: key, Value: val})
	default:
		stats.Op("failed")
	}
}

// maybeApplied reports whether a failed write may have taken effect. The
// client promises ErrUnavailable (without ErrUnknownOutcome) means it
// did not, and so does a NoSpace refusal; every error we cannot classify
// counts as maybe.
func maybeApplied(err error) bool {
	if errors.Is(err, client.ErrUnknownOutcome) {
		return true
	}
	for _, definite := range []error{client.ErrUnavailable, client.ErrConflict, client.ErrInvalidInput, client.ErrNotFound, client.ErrNoSpace} {
		if errors.Is(err, definite) {
			return false
		}
	}
	return true
}

// unexplained is an error that no injected fault accounts for.
func unexplained(err error) bool {
	return errors.Is(err, client.ErrInvalidInput) || errors.Is(err, client.ErrInternal)
}

func errKind(err error) string {
	for _, e := range []error{client.ErrInvalidInput, client.ErrInternal} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return "other"
}

// Final implements Workload: a linearizable read of every key used, so
// the checkers see the state the faults left behind (a lost
// acknowledged write shows up as a read that cannot be linearized).
func (w *KVWorkload) Final(ctx context.Context, rec *Recorder, stats *Stats) {
	w.mu.Lock()
	keys := make([]string, 0, len(w.keys))
	for k := range w.keys {
		keys = append(keys, k)
	}
	w.mu.Unlock()
	c := w.Clients[0]
	for _, k := range keys {
		win, _ := strconv.Atoi(k[1:indexByte(k, '/')])
		in := Input{Kind: OpGet, Key: k, Window: win}
		err := retry(ctx, func(ctx context.Context) error {
			call := rec.Now()
			kv, err := c.Get(ctx, k)
			out := Output{}
			switch {
			case err == nil:
				out = Output{Exists: true, Value: string(kv.Value)}
			case errors.Is(err, client.ErrNotFound):
			default:
				return err
			}
			rec.Record(len(w.Clients), in, call, out, rec.Now())
			stats.Op("ok")
			return nil
		})
		if err != nil {
			stats.Unexpect("final read: " + err.Error())
		}
	}
}

func indexByte(s string, b byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == b {
			return i
		}
	}
	return len(s)
}
