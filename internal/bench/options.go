package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/bench/runner"
)

// The runner's types, under the names DKV workloads use.
type (
	Result     = runner.Result
	Worker     = runner.Worker
	WorkerFunc = runner.WorkerFunc
)

// Options configures a DKV benchmark run (Bench).
type Options struct {
	// Workload is a registered workload name: put, get, mixed, txn, counter.
	Workload string
	// Endpoints are gRPC client addresses; connections are spread over
	// them round-robin. Default 127.0.0.1:7861.
	Endpoints []string
	// Route is RouteLeader (the default: writes and keep-alive streams
	// over Conns connections to the leader found at setup, reads spread
	// over Endpoints, as DKV's Go client routes) or RouteSpread (every
	// request over the spread connections; followers forward writes, as
	// with etcd's clientv3). A leader that cannot be found means spread,
	// said on Warn.
	Route string
	// Warn receives notices about the run's setup, such as a fallback
	// from RouteLeader to spreading (nil: none).
	Warn io.Writer
	// Clients is the number of concurrent workers (default 64). Conns is
	// the number of gRPC connections they share round-robin (default 8,
	// at most Clients).
	Clients int
	Conns   int
	// Duration or Total ends the run (default: 10s when neither is set).
	Duration time.Duration
	Total    int64
	// Rate, when > 0, caps ops/s across all clients.
	Rate float64
	// Keys is the key space size (default 100000); keys are
	// KeyPrefix + a zero-padded index, chosen uniformly at random.
	Keys int
	// ValueSize is the value length in bytes (default 256).
	ValueSize int
	// ReadRatio is the fraction of reads in the mixed workload, in [0, 1].
	// 0 means all writes; the CLI defaults it to 0.9.
	ReadRatio float64
	// Serializable makes reads local to the node they reach (possibly
	// stale) instead of linearizable.
	Serializable bool
	// Sessions sends the put and counter workloads' writes in a client
	// session per worker, as the Go client does (exactly-once writes).
	Sessions bool
	// KeyPrefix namespaces the benchmark's keys (default "bench/").
	KeyPrefix string
	// Watchers is the number of watches on the watch workload's prefix
	// (default 100), multiplexed over one Watch stream per connection.
	Watchers int
	// WatchConns is the number of connections the watch-fanout
	// workload's watchers are spread over, one Watch stream each,
	// round-robin over the endpoints (default 8). Its writer uses the
	// usual connections.
	WatchConns int
	// RateLimit and RateBurst are the ratelimit workload's bucket: tokens
	// per second (default 1e6) and capacity (default 1000).
	RateLimit int64
	RateBurst int64
	// QueueBatch is the queue workload's batch: 0 or 1 enqueues, claims
	// and acks one job per call; N > 1 has producers call EnqueueBatch
	// with N jobs and consumers ClaimBatch up to N and AckBatch them.
	QueueBatch int
	// QueueAckClaim (with QueueBatch > 1) has consumers call
	// AckClaimBatch: the last batch's acks and the next claim in one
	// call.
	QueueAckClaim bool
	// NoPreload skips writing the whole key space before read workloads.
	NoPreload bool
	// Seed makes key choice reproducible; 0 picks one from the clock. The
	// seed used is reported in Result.Params.
	Seed uint64
	// OpTimeout bounds each op (default 10s) so a stuck server cannot
	// hang the run; a timed-out op counts as DeadlineExceeded.
	OpTimeout time.Duration
	// Progress receives a progress line every second (nil: none).
	Progress io.Writer
	// Dial opens one connection to endpoint. Nil dials plain-text gRPC.
	Dial func(ctx context.Context, endpoint string) (*grpc.ClientConn, error)
}

// EnsureDefaults fills unset fields.
func (o *Options) EnsureDefaults() {
	if len(o.Endpoints) == 0 {
		o.Endpoints = []string{"127.0.0.1:7861"}
	}
	if o.Route == "" {
		o.Route = RouteLeader
	}
	if o.Clients == 0 {
		o.Clients = 64
	}
	if o.Conns == 0 {
		o.Conns = 8
	}
	o.Conns = min(o.Conns, o.Clients)
	if o.Duration == 0 && o.Total == 0 {
		o.Duration = 10 * time.Second
	}
	if o.Keys == 0 {
		o.Keys = 100000
	}
	if o.ValueSize == 0 {
		o.ValueSize = 256
	}
	if o.Watchers == 0 {
		o.Watchers = 100
	}
	if o.WatchConns == 0 {
		o.WatchConns = 8
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = "bench/"
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	if o.OpTimeout == 0 {
		o.OpTimeout = 10 * time.Second
	}
}

// Validate reports the first invalid setting.
func (o *Options) Validate() error {
	if _, ok := registry[o.Workload]; !ok {
		return fmt.Errorf("unknown workload %q (have %v)", o.Workload, WorkloadNames())
	}
	switch {
	case o.Route != RouteLeader && o.Route != RouteSpread:
		return fmt.Errorf("route must be %q or %q, got %q", RouteLeader, RouteSpread, o.Route)
	case o.Clients < 1:
		return fmt.Errorf("clients must be >= 1, got %d", o.Clients)
	case o.Conns < 1:
		return fmt.Errorf("conns must be >= 1, got %d", o.Conns)
	case o.Duration < 0 || o.Total < 0:
		return errors.New("duration and total must not be negative")
	case o.Rate < 0:
		return fmt.Errorf("rate must not be negative, got %g", o.Rate)
	case o.Keys < 1:
		return fmt.Errorf("keys must be >= 1, got %d", o.Keys)
	case o.ValueSize < 0:
		return fmt.Errorf("value size must not be negative, got %d", o.ValueSize)
	case o.QueueBatch < 0 || o.QueueBatch > 64:
		return fmt.Errorf("queue batch must be 0 to 64, got %d", o.QueueBatch)
	case o.Watchers < 0:
		return fmt.Errorf("watchers must not be negative, got %d", o.Watchers)
	case o.WatchConns < 0:
		return fmt.Errorf("watch conns must not be negative, got %d", o.WatchConns)
	case o.ReadRatio < 0 || o.ReadRatio > 1:
		return fmt.Errorf("read ratio must be in [0, 1], got %g", o.ReadRatio)
	}
	for _, e := range o.Endpoints {
		if e == "" {
			return errors.New("empty endpoint")
		}
	}
	return nil
}

// Workload is one kind of load. To add one (lease-keepalive, lock, watch,
// ...), implement it in its own file and Register it from an init func;
// the CLI and the JSON output pick it up by name.
type Workload interface {
	// Setup prepares the store before the clock starts (e.g. preloads
	// the keys a read workload reads).
	Setup(ctx context.Context, env *Env) error
	// NewWorker returns client i's op. It is called once per client
	// before the run starts.
	NewWorker(i int, env *Env) (Worker, error)
}

// Finisher is an optional Workload hook called after the run, to check or
// add metrics to the result (Result.Extra).
type Finisher interface {
	Finish(ctx context.Context, env *Env, res *Result) error
}

type registration struct {
	doc string
	new func() Workload
}

var registry = map[string]registration{}

// Register makes a workload available under name. It panics on a
// duplicate name (a programming error found at init).
func Register(name, doc string, newWorkload func() Workload) {
	if _, dup := registry[name]; dup {
		panic("bench: workload registered twice: " + name)
	}
	registry[name] = registration{doc, newWorkload}
}

// WorkloadNames lists the registered workloads, sorted.
func WorkloadNames() []string {
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// WorkloadDoc is the one-line description of a registered workload.
func WorkloadDoc(name string) string { return registry[name].doc }

// Env is what workloads see of the run: the options and the connections.
type Env struct {
	Opts *Options
	// conns are spread over the endpoints; writes are to the leader
	// (RouteLeader) or the same as conns.
	conns, writes []*grpc.ClientConn
	// route is the routing used (RouteSpread when the leader was not
	// found), leader the leader's endpoint with RouteLeader.
	route, leader string
}

// Conn is the connection client i reads on (shared round-robin, spread
// over the endpoints).
func (e *Env) Conn(i int) *grpc.ClientConn { return e.conns[i%len(e.conns)] }

// WriteConn is the connection client i sends writes on: to the leader
// with RouteLeader, else Conn(i). Lease keep-alive streams use it too,
// since every renewal is a raft proposal on the leader.
func (e *Env) WriteConn(i int) *grpc.ClientConn {
	if len(e.writes) == 0 {
		return e.Conn(i)
	}
	return e.writes[i%len(e.writes)]
}

// KV is the KV client over Conn(i), for reads.
func (e *Env) KV(i int) dkvpb.KVClient { return dkvpb.NewKVClient(e.Conn(i)) }

// WriteKV is the KV client over WriteConn(i), for writes.
func (e *Env) WriteKV(i int) dkvpb.KVClient { return dkvpb.NewKVClient(e.WriteConn(i)) }

// Rand is a random source for client i, reproducible from Opts.Seed.
func (e *Env) Rand(i int) *rand.Rand {
	return rand.New(rand.NewPCG(e.Opts.Seed, uint64(i)))
}

// Key is key number n of the key space: KeyPrefix + zero-padded n.
func (e *Env) Key(n int) []byte { return appendKey(nil, e.Opts.KeyPrefix, n) }

// Value returns a ValueSize-byte printable value filled from r.
func (e *Env) Value(r *rand.Rand) []byte {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	v := make([]byte, e.Opts.ValueSize)
	for i := range v {
		v[i] = alphabet[r.IntN(len(alphabet))]
	}
	return v
}

func appendKey(b []byte, prefix string, n int) []byte {
	const width = 10
	b = append(b, prefix...)
	s := strconv.Itoa(n)
	for i := len(s); i < width; i++ {
		b = append(b, '0')
	}
	return append(b, s...)
}

func dialFunc(o *Options) func(context.Context, string) (*grpc.ClientConn, error) {
	if o.Dial != nil {
		return o.Dial
	}
	return func(_ context.Context, ep string) (*grpc.ClientConn, error) {
		return grpc.NewClient(ep, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
}

func dialAll(ctx context.Context, o *Options) ([]*grpc.ClientConn, error) {
	dial := dialFunc(o)
	conns := make([]*grpc.ClientConn, o.Conns)
	for i := range conns {
		c, err := dial(ctx, o.Endpoints[i%len(o.Endpoints)])
		if err != nil {
			for _, c := range conns[:i] {
				c.Close()
			}
			return nil, fmt.Errorf("dial %s: %w", o.Endpoints[i%len(o.Endpoints)], err)
		}
		conns[i] = c
	}
	return conns, nil
}

// Bench runs one DKV workload as o describes and returns its result.
func Bench(ctx context.Context, o Options) (*Result, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	wl := registry[o.Workload].new()
	conns, err := dialAll(ctx, &o)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	writes, route, leader, err := dialWrites(ctx, &o, dialFunc(&o), conns)
	if err != nil {
		return nil, err
	}
	if route == RouteLeader {
		defer func() {
			for _, c := range writes {
				c.Close()
			}
		}()
	}
	env := &Env{Opts: &o, conns: conns, writes: writes, route: route, leader: leader}
	if err := wl.Setup(ctx, env); err != nil {
		return nil, fmt.Errorf("%s setup: %w", o.Workload, err)
	}
	res, err := runner.Run(ctx, runner.RunConfig{
		Workload: o.Workload,
		System:   "dkv",
		Clients:  o.Clients,
		Duration: o.Duration,
		Total:    o.Total,
		Rate:     o.Rate,
		Progress: o.Progress,
		Classify: ClassifyDKV,
	}, func(i int) (Worker, error) {
		w, err := wl.NewWorker(i, env)
		if err != nil || o.OpTimeout <= 0 {
			return w, err
		}
		return withTimeout(w, o.OpTimeout), nil
	})
	if res != nil {
		res.Conns = o.Conns
		res.Route = route
		res.Params = map[string]any{
			"keys":       o.Keys,
			"value_size": o.ValueSize,
			"endpoints":  o.Endpoints,
			"seed":       o.Seed,
		}
		if o.Workload == "watch" || o.Workload == "watch-fanout" {
			res.Params["watchers"] = o.Watchers
		}
		if o.Workload == "watch-fanout" {
			res.Params["watch_conns"] = o.WatchConns
		}
		if o.Workload == "mixed" {
			res.Params["read_ratio"] = o.ReadRatio
		}
		if o.Workload == "queue" && o.QueueBatch > 1 {
			res.Params["queue_batch"] = o.QueueBatch
			if o.QueueAckClaim {
				res.Params["queue_ack_claim"] = true
			}
		}
		if leader != "" {
			res.Params["leader"] = leader
		}
		if route != o.Route {
			res.Params["route_requested"] = o.Route
		}
		if o.Serializable {
			res.Params["serializable"] = true
		}
		if o.Rate > 0 {
			res.Params["rate"] = o.Rate
		}
	}
	if err != nil {
		return res, err
	}
	if f, ok := wl.(Finisher); ok {
		if err := f.Finish(ctx, env, res); err != nil {
			return res, fmt.Errorf("%s finish: %w", o.Workload, err)
		}
	}
	return res, nil
}

type timeoutWorker struct {
	w Worker
	d time.Duration
}

func (t timeoutWorker) Op(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, t.d)
	defer cancel()
	return t.w.Op(ctx)
}

func (t timeoutWorker) Close() error {
	if c, ok := t.w.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

func withTimeout(w Worker, d time.Duration) Worker { return timeoutWorker{w, d} }
