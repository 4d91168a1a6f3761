package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Run is what checkers see once the workloads have stopped and every
// fault has been healed.
type Run struct {
	Seed    int64
	History *Recorder
	// Endpoints are the client addresses of every live member.
	Endpoints   []string
	ArtifactDir string
	Stats       *Stats
}

// Anomaly is one violated guarantee.
type Anomaly struct {
	Checker string
	Msg     string
	// Artifact is a file that shows it (porcupine's visualisation), if
	// any.
	Artifact string
}

func (a Anomaly) String() string {
	s := a.Checker + ": " + a.Msg
	if a.Artifact != "" {
		s += " (see " + a.Artifact + ")"
	}
	return s
}

// Checker checks one guarantee over a finished run. Lock safety, watch
// completeness and lease safety plug in here next to the KV checkers.
type Checker interface {
	Name() string
	Check(ctx context.Context, r *Run) []Anomaly
}

// Stats counts what a run did.
type Stats struct {
	mu sync.Mutex
	// Ops counts recorded operations by outcome: ok, unknown, failed
	// (definitely not applied, left out of the history).
	Ops map[string]int
	// Histories is the number of independent histories (windows) checked
	// for linearizability; Keys the per-key partitions among them;
	// Inconclusive those porcupine could not decide within its budget.
	Histories, Keys, Inconclusive int
	// Faults counts injected faults by kind.
	Faults map[string]int
	// Unexpected counts errors no fault explains (kept for the report;
	// they are not anomalies by themselves).
	Unexpected map[string]int
	// Checked counts what the coordination checkers examined (lock
	// writes, watch events, lease reads...).
	Checked map[string]int
}

// NewStats returns empty counters.
func NewStats() *Stats {
	return &Stats{Ops: map[string]int{}, Faults: map[string]int{}, Unexpected: map[string]int{}, Checked: map[string]int{}}
}

func (s *Stats) add(m map[string]int, k string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m[k] += n
}

// Op counts one operation outcome.
func (s *Stats) Op(outcome string) { s.add(s.Ops, outcome, 1) }

// Fault counts one injected fault.
func (s *Stats) Fault(kind string) { s.add(s.Faults, kind, 1) }

// Check counts n things a checker examined.
func (s *Stats) Check(what string, n int) { s.add(s.Checked, what, n) }

// Unexpect counts an error no fault explains.
func (s *Stats) Unexpect(what string) { s.add(s.Unexpected, what, 1) }

// Merge adds o's counts into s.
func (s *Stats) Merge(o *Stats) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for k, v := range o.Ops {
		s.add(s.Ops, k, v)
	}
	for k, v := range o.Faults {
		s.add(s.Faults, k, v)
	}
	for k, v := range o.Unexpected {
		s.add(s.Unexpected, k, v)
	}
	for k, v := range o.Checked {
		s.add(s.Checked, k, v)
	}
	s.mu.Lock()
	s.Histories += o.Histories
	s.Keys += o.Keys
	s.Inconclusive += o.Inconclusive
	s.mu.Unlock()
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func sortedCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s := ""
	for i, k := range keys {
		if i > 0 {
			s += ", "
		}
		s += k + "=" + strconv.Itoa(m[k])
	}
	if s == "" {
		return "none"
	}
	return s
}

// Summary is the report's body, one fact a line.
func (s *Stats) Summary() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("operations:        %d (%s)\nhistories checked: %d (%d keys, %d inconclusive)\nfaults injected:   %d (%s)\ncoordination:      %s\nunexplained errors: %s\n",
		total(s.Ops), sortedCounts(s.Ops), s.Histories, s.Keys, s.Inconclusive,
		total(s.Faults), sortedCounts(s.Faults), sortedCounts(s.Checked), sortedCounts(s.Unexpected))
}

// ArtifactDir is where checkers write evidence: $DKV_ARTIFACTS, or
// ./artifacts.
func ArtifactDir() string {
	if d := os.Getenv("DKV_ARTIFACTS"); d != "" {
		return d
	}
	return "artifacts"
}

// Linearizability checks the KV history with porcupine. The history is
// split by window (every window uses its own keys, so windows are
// independent) and each window is partitioned per key; Timeout bounds
// each window's search.
type Linearizability struct {
	Timeout time.Duration
}

func (Linearizability) Name() string { return "linearizability" }

func (l Linearizability) Check(ctx context.Context, r *Run) []Anomaly {
	timeout := l.Timeout
	if timeout == 0 {
		timeout = time.Minute
	}
	byWindow := map[int][]porcupine.Operation{}
	for _, op := range r.History.Operations() {
		w := op.Input.(Input).Window
		byWindow[w] = append(byWindow[w], op)
	}
	windows := make([]int, 0, len(byWindow))
	for w := range byWindow {
		windows = append(windows, w)
	}
	sort.Ints(windows)
	var out []Anomaly
	for _, w := range windows {
		ops := byWindow[w]
		res := porcupine.CheckOperationsTimeout(KVModel, ops, timeout)
		r.Stats.mu.Lock()
		r.Stats.Histories++
		r.Stats.Keys += len(partitionByKey(ops))
		if res == porcupine.Unknown {
			r.Stats.Inconclusive++
		}
		r.Stats.mu.Unlock()
		if res != porcupine.Illegal {
			continue
		}
		a := Anomaly{Checker: l.Name(), Msg: fmt.Sprintf("window %d (%d operations) is not linearizable", w, len(ops))}
		if path, err := visualize(r, w, ops, timeout); err != nil {
			a.Msg += fmt.Sprintf("; visualisation failed: %v", err)
		} else {
			a.Artifact = path
		}
		out = append(out, a)
	}
	return out
}

func visualize(r *Run, window int, ops []porcupine.Operation, timeout time.Duration) (string, error) {
	_, info := porcupine.CheckOperationsVerbose(KVModel, ops, timeout)
	if err := os.MkdirAll(r.ArtifactDir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(r.ArtifactDir, fmt.Sprintf("linearizability-seed%d-window%d.html", r.Seed, window))
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	return path, porcupine.VisualizePath(KVModel, info, path)
}

// LedgerStream is the Recorder stream of ledger writes: unique keys each
// written once with IfAbsent.
const LedgerStream = "kv/ledger"

// LedgerWrite is one ledger put and whether it was acknowledged.
type LedgerWrite struct {
	Key, Value string
	Acked      bool
}

// Durability checks that every acknowledged ledger write is still there
// after the faults (crashes, restarts, partitions) have healed: no
// acknowledged write is lost. Writes with unknown outcomes may be there
// or not, but nothing else may.
type Durability struct{}

func (Durability) Name() string { return "durability" }

func (d Durability) Check(ctx context.Context, r *Run) []Anomaly {
	var out []Anomaly
	written := map[string]LedgerWrite{}
	for _, ev := range r.History.Stream(LedgerStream) {
		w := ev.(LedgerWrite)
		written[w.Key] = w
	}
	conn, err := dial(r.Endpoints)
	if err != nil {
		return []Anomaly{{Checker: d.Name(), Msg: err.Error()}}
	}
	defer conn.Close()
	kv := dkvpb.NewKVClient(conn)
	var resp *dkvpb.RangeResponse
	err = retry(ctx, func(ctx context.Context) (err error) {
		resp, err = kv.Range(ctx, &dkvpb.RangeRequest{Key: []byte("ledger/"), Prefix: true})
		return err
	})
	if err != nil {
		return []Anomaly{{Checker: d.Name(), Msg: fmt.Sprintf("final read of the ledger: %v", err)}}
	}
	found := map[string]string{}
	for _, kv := range resp.Kvs {
		found[string(kv.Key)] = string(kv.Value)
	}
	lost := 0
	for k, w := range written {
		v, ok := found[k]
		switch {
		case ok && v != w.Value:
			out = append(out, Anomaly{Checker: d.Name(), Msg: fmt.Sprintf("ledger key %s holds %q, wrote %q", k, v, w.Value)})
		case !ok && w.Acked:
			lost++
			if lost <= 10 {
				out = append(out, Anomaly{Checker: d.Name(), Msg: fmt.Sprintf("acknowledged write of %s is lost", k)})
			}
		}
	}
	for k := range found {
		if _, ok := written[k]; !ok {
			out = append(out, Anomaly{Checker: d.Name(), Msg: fmt.Sprintf("ledger key %s exists but was never written", k)})
		}
	}
	if lost > 10 {
		out = append(out, Anomaly{Checker: d.Name(), Msg: fmt.Sprintf("%d acknowledged writes lost in all", lost)})
	}
	return out
}

// CounterBounds checks that no counter result and no read of a counter
// ever left the counter's bounds.
type CounterBounds struct{}

func (CounterBounds) Name() string { return "counter-bounds" }

func (c CounterBounds) Check(ctx context.Context, r *Run) []Anomaly {
	bounds := map[string][2]int64{}
	for _, op := range r.History.Operations() {
		in := op.Input.(Input)
		if in.Kind == OpCounter {
			bounds[in.Key] = [2]int64{in.Min, in.Max}
		}
	}
	var out []Anomaly
	for _, op := range r.History.Operations() {
		in, o := op.Input.(Input), op.Output.(Output)
		b, isCounter := bounds[in.Key]
		if !isCounter || o.Unknown || !((in.Kind == OpCounter && o.OK) || (in.Kind == OpGet && o.Exists)) {
			continue
		}
		n, err := strconv.ParseInt(o.Value, 10, 64)
		if err != nil || n < b[0] || n > b[1] {
			out = append(out, Anomaly{Checker: c.Name(), Msg: fmt.Sprintf("%s observed %q outside [%d,%d]", describeOp(in, o), o.Value, b[0], b[1])})
		}
	}
	return out
}

// Convergence checks that every live member ends with the same KV state:
// equal HashKV at one revision.
type Convergence struct {
	// Timeout bounds the wait for members to catch up (default 30s).
	Timeout time.Duration
}

func (Convergence) Name() string { return "convergence" }

func (c Convergence) Check(ctx context.Context, r *Run) []Anomaly {
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	err := WaitConverged(ctx, r.Endpoints, timeout)
	if err != nil {
		return []Anomaly{{Checker: c.Name(), Msg: err.Error()}}
	}
	return nil
}

// WaitConverged polls every endpoint's HashKV until all report the same
// revision and hash. Equal revisions with different hashes is divergence
// and fails at once.
func WaitConverged(ctx context.Context, endpoints []string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conns := make([]*grpc.ClientConn, len(endpoints))
	for i, ep := range endpoints {
		conn, err := dial([]string{ep})
		if err != nil {
			return err
		}
		defer conn.Close()
		conns[i] = conn
	}
	var last string
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		hs := make([]*dkvpb.HashKVResponse, len(conns))
		var err error
		for i, conn := range conns {
			cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
			hs[i], err = dkvpb.NewClusterClient(conn).HashKV(cctx, &dkvpb.HashKVRequest{})
			ccancel()
			if err != nil {
				last = fmt.Sprintf("hashkv on %s: %v", endpoints[i], err)
				break
			}
		}
		if err == nil {
			same := true
			for i, h := range hs[1:] {
				if h.Revision != hs[0].Revision {
					same = false
					last = fmt.Sprintf("%s at revision %d, %s at %d", endpoints[0], hs[0].Revision, endpoints[i+1], h.Revision)
					break
				}
				if h.Hash != hs[0].Hash {
					return fmt.Errorf("replicas diverged: at revision %d %s hashes %x, %s hashes %x", h.Revision, endpoints[0], hs[0].Hash, endpoints[i+1], h.Hash)
				}
			}
			if same {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("members did not converge within %v: %s", timeout, last)
		case <-tick.C:
		}
	}
}

func dial(endpoints []string) (*grpc.ClientConn, error) {
	target := "passthrough:///" + endpoints[0]
	return grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// retry runs f with a short per-attempt deadline until it succeeds or
// ctx (bounded to 30s) ends.
func retry(ctx context.Context, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		actx, acancel := context.WithTimeout(ctx, 3*time.Second)
		err := f(actx)
		acancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-tick.C:
		}
	}
}
