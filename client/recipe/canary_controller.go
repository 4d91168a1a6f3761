package recipe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/concurrency"
)

// CanaryRecord is one decision of a CanaryController, as recorded under
// "dkv.canary/NAME/decisions/" (JSON, key = zero-padded sequence number).
type CanaryRecord struct {
	Seq     int64 `json:"seq"`
	Percent int   `json:"percent"` // the stage decided on
	// Baseline and Canary are the counts decided on: since the rollout
	// began, or since the stage began WithStageWindows.
	Baseline VariantStats     `json:"baseline"`
	Canary   VariantStats     `json:"canary"`
	Decision string           `json:"decision"`
	Next     int              `json:"next_percent"` // the percentage set after it
	Revision int64            `json:"revision"`     // the store revision the counters were read at
	Term     int64            `json:"term"`         // the deciding leader's fencing token
	Limits   CanaryThresholds `json:"thresholds"`
}

// CanaryController walks a flag through rollout stages by the canary
// rule. Instances count traffic with ReportCanary; Step, called by the
// elected leader, reads the counters, decides and records the decision;
// every write it makes is fenced by the leadership.
type CanaryController struct {
	c          client.KV
	name       string
	stages     []int
	th         CanaryThresholds
	setPercent func(ctx context.Context, percent int, fence client.LockHandle) error
	perStage   bool
}

// WithStageWindows makes every decision count only the requests reported
// since the rollout entered its current stage, not since it began, and
// returns cc. Cumulative counts mix stages with different traffic
// shares: a failure that hits both variants alike during a later stage
// (a baseline outage: a database down) weighs more in the canary's
// counts, whose requests mostly come from that stage, and rolls back a
// healthy canary. Within one stage both variants are counted over the
// same time window. The totals at each stage change are kept under
// "dkv.canary/NAME/window".
func (cc *CanaryController) WithStageWindows() *CanaryController {
	cc.perStage = true
	return cc
}

// canaryWindow is the counter totals when the current stage began.
type canaryWindow struct {
	Baseline VariantStats `json:"baseline"`
	Canary   VariantStats `json:"canary"`
}

// DefaultCanaryStages are the rollout percentages unless told otherwise.
var DefaultCanaryStages = []int{5, 25, 50, 100}

// NewCanaryController returns the controller of rollout name; setPercent
// sets the flag's rollout percentage (fenced with the handle it is given).
func NewCanaryController(c client.KV, name string, stages []int, th CanaryThresholds,
	setPercent func(ctx context.Context, percent int, fence client.LockHandle) error) *CanaryController {
	if len(stages) == 0 {
		stages = DefaultCanaryStages
	}
	return &CanaryController{c: c, name: name, stages: stages, th: th.withDefaults(), setPercent: setPercent}
}

func canaryPrefix(name string) string { return "dkv.canary/" + name + "/" }

func canaryCounter(name, variant, what string) string {
	return canaryPrefix(name) + "counters/" + variant + "/" + what
}

// ReportCanary counts one request served by variant ("baseline" or
// "canary") of rollout name, and an error if failed.
func ReportCanary(ctx context.Context, c client.KV, name, variant string, failed bool) error {
	var errs int64
	if failed {
		errs = 1
	}
	return ReportCanaryCounts(ctx, c, name, variant, 1, errs)
}

// ReportCanaryCounts adds requests requests and errors errors served by
// variant of rollout name: for an instance that counts locally and
// flushes its counts every so often, at two counter writes per flush
// instead of one or two per request. (The two writes are separate: a
// Step between them sees the requests without their errors.)
func ReportCanaryCounts(ctx context.Context, c client.KV, name, variant string, requests, errors int64) error {
	if variant != "baseline" && variant != "canary" {
		return &client.Error{Kind: client.ErrInvalidInput, Msg: "canary variant must be baseline or canary"}
	}
	if requests < 0 || errors < 0 || errors > requests {
		return &client.Error{Kind: client.ErrInvalidInput, Msg: fmt.Sprintf("canary counts: %d errors in %d requests", errors, requests)}
	}
	if requests > 0 {
		if _, err := c.Counter(ctx, canaryCounter(name, variant, "requests"), requests); err != nil {
			return err
		}
	}
	if errors > 0 {
		_, err := c.Counter(ctx, canaryCounter(name, variant, "errors"), errors)
		return err
	}
	return nil
}

// ErrRolloutFinished is returned by Step once the rollout reached 100%
// or was rolled back.
var ErrRolloutFinished = errors.New("recipe: the rollout is finished")

func (cc *CanaryController) readInt(ctx context.Context, key string, h client.LockHandle) (int64, int64, error) {
	kv, err := cc.c.Get(ctx, key, client.WithLock(h))
	if errors.Is(err, client.ErrNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	n, err := strconv.ParseInt(string(kv.Value), 10, 64)
	return n, kv.ModRevision, err
}

// Step makes one decision as leader l: at the current stage (the first
// stage if none yet) it reads the counters (fenced reads), applies
// DecideCanary, records the decision together with the stage it leads to
// (one transaction), then sets the flag's percentage (next stage on
// proceed, 0 on rollback), all fenced by l: a deposed leader's Step fails
// with client.ErrLocked and changes nothing. If the last leader died
// before setting the flag, Step sets it first (setPercent may be called
// again with the same percentage).
func (cc *CanaryController) Step(ctx context.Context, l *concurrency.Leadership) (*CanaryRecord, error) {
	h := l.Handle()
	p := canaryPrefix(cc.name)
	stageIdx, _, err := cc.readInt(ctx, p+"stage", h)
	if err != nil {
		return nil, err
	}
	seq, _, err := cc.readInt(ctx, p+"seq", h)
	if err != nil {
		return nil, err
	}
	// The flag follows the recorded stage: a leader that died between
	// recording a decision and setting the flag left it behind; the next
	// one sets it before anything else, and does not decide that stage
	// again.
	applied, _, err := cc.readInt(ctx, p+"applied", h)
	if err != nil {
		return nil, err
	}
	if applied != stageIdx {
		if err := cc.apply(ctx, h, stageIdx); err != nil {
			return nil, err
		}
	}
	if stageIdx < 0 || int(stageIdx) >= len(cc.stages) {
		return nil, ErrRolloutFinished
	}
	rr, err := cc.c.List(ctx, p+"counters/", client.WithLock(h))
	if err != nil {
		return nil, err
	}
	var base, can VariantStats
	for _, kv := range rr.KVs {
		n, err := strconv.ParseInt(string(kv.Value), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("recipe: canary counter %s: %w", kv.Key, err)
		}
		switch kv.Key[len(p+"counters/"):] {
		case "baseline/requests":
			base.Requests = n
		case "baseline/errors":
			base.Errors = n
		case "canary/requests":
			can.Requests = n
		case "canary/errors":
			can.Errors = n
		}
	}
	totals := canaryWindow{Baseline: base, Canary: can}
	if cc.perStage {
		kv, err := cc.c.Get(ctx, p+"window", client.WithLock(h))
		switch {
		case errors.Is(err, client.ErrNotFound): // the first stage: since the start
		case err != nil:
			return nil, err
		default:
			var w canaryWindow
			if err := json.Unmarshal(kv.Value, &w); err != nil {
				return nil, fmt.Errorf("recipe: canary window %s: %w", kv.Key, err)
			}
			base = VariantStats{Requests: base.Requests - w.Baseline.Requests, Errors: base.Errors - w.Baseline.Errors}
			can = VariantStats{Requests: can.Requests - w.Canary.Requests, Errors: can.Errors - w.Canary.Errors}
		}
	}
	percent := cc.stages[stageIdx]
	d := DecideCanary(base, can, cc.th)
	next, nextIdx := percent, stageIdx
	switch d {
	case CanaryProceed:
		nextIdx = stageIdx + 1
		if int(nextIdx) < len(cc.stages) {
			next = cc.stages[nextIdx]
		}
	case CanaryRollback:
		next, nextIdx = 0, -1
	}
	rec := &CanaryRecord{Seq: seq + 1, Percent: percent, Baseline: base, Canary: can, Decision: d.String(),
		Next: next, Revision: rr.Revision, Term: h.Token, Limits: cc.th}
	val, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	// The decision's record and the stage it leads to commit together,
	// fenced: a leader killed in between leaves neither or both, so its
	// successor neither loses a decision nor makes it twice. The flag is
	// set after; if that is lost, the successor sets it (applied).
	ops := []client.Op{
		client.OpPut(fmt.Sprintf("%sdecisions/%020d", p, rec.Seq), val),
		client.OpPut(p+"seq", []byte(strconv.FormatInt(rec.Seq, 10))),
	}
	if d != CanaryWait {
		if cc.perStage {
			w, _ := json.Marshal(totals)
			ops = append(ops, client.OpPut(p+"window", w))
		}
		ops = append(ops, client.OpPut(p+"stage", []byte(strconv.FormatInt(nextIdx, 10))))
	}
	res, err := cc.c.Txn(ctx).If(client.LockHeld(h)).Then(ops...).Commit()
	if err != nil {
		return nil, err
	}
	if !res.Succeeded {
		return nil, &client.Error{Kind: client.ErrLocked, Msg: fmt.Sprintf("canary %s: leadership (token %d) is not current", cc.name, h.Token)}
	}
	if d != CanaryWait {
		if err := cc.apply(ctx, h, nextIdx); err != nil {
			return nil, err
		}
	}
	return rec, nil
}

// apply sets the flag to stage idx's percentage (0 after a rollback, the
// last stage's once finished) and records that it did.
func (cc *CanaryController) apply(ctx context.Context, h client.LockHandle, idx int64) error {
	percent := 0
	switch {
	case idx >= int64(len(cc.stages)):
		percent = cc.stages[len(cc.stages)-1]
	case idx >= 0:
		percent = cc.stages[idx]
	}
	if err := cc.setPercent(ctx, percent, h); err != nil {
		return err
	}
	_, err := cc.c.Put(ctx, canaryPrefix(cc.name)+"applied", []byte(strconv.FormatInt(idx, 10)), client.WithLock(h))
	return err
}

// Decisions returns the recorded decisions of rollout name, oldest first.
func Decisions(ctx context.Context, c client.KV, name string) ([]CanaryRecord, error) {
	rr, err := c.List(ctx, canaryPrefix(name)+"decisions/")
	if err != nil {
		return nil, err
	}
	out := make([]CanaryRecord, 0, len(rr.KVs))
	for _, kv := range rr.KVs {
		var r CanaryRecord
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}
