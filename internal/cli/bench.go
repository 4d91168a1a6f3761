package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dkv-io/dkv/internal/bench"
)

// benchCmd is `dkv bench WORKLOAD`: one subcommand per workload registered
// in internal/bench, so a new workload needs no CLI change. It uses the
// global --endpoints and -o; the result goes to stdout (one table, or JSON
// with -o json), the progress line to stderr.
func (a *App) benchCmd() *cobra.Command {
	var (
		o        bench.Options
		quiet    bool
		duration time.Duration
	)
	cmd := &cobra.Command{
		Use:   "bench WORKLOAD",
		Short: "Generate load against a cluster and report throughput and latency",
		Long: `Run a workload against --endpoints with --clients concurrent clients
sharing --conns gRPC connections (spread over the endpoints), for --duration
or --total ops. Prints ops/s, p50/p90/p99/p99.9/max latency of the
successful ops, and failed ops counted by status; -o json for machines. A
progress line goes to stderr every second (--quiet: none).

Keys are <--key-prefix><10-digit index>, uniform over --keys. get and mixed
first write every key once unless the key space is already full
(--no-preload skips that). Run against a test cluster: put, mixed, txn and
counter overwrite keys under the prefix.

--route leader (the default) asks the endpoints at setup which member
leads and sends every write (put, delete, txn, counter, lock, lease grant
and revoke, queue and rate-limit calls) and every lease keep-alive stream
over --conns connections to it, as DKV's Go client does once it knows the
leader; reads and watch streams stay spread over the endpoints. --route
spread spreads every connection over the endpoints round-robin, so writes
that reach a follower are forwarded by it to the leader: what etcd's
clientv3 does (each client talks to one member). While no member knows a
leader (an election) the setup asks again for up to 10 s; if the leader
cannot be found the run spreads and says so on stderr; the output's route line and
the JSON "route" field say which routing was used. A leader change during
the run is not followed: writes keep going to the old leader.

lease-keepalive grants --keys leases, renews each client's share over one
KeepAlive stream per client (an op = one acknowledged keep-alive), then
revokes them. watch creates --watchers watches on <prefix>watch/ and runs
--clients writers putting there; besides the put latency it reports
delivered events, events/s and put→event latency (extra: event_*_ms).

watch-fanout measures many watchers of one prefix, e.g. behind dkv proxy:
it spreads --watchers watches over --watch-conns connections (one stream
each, round-robin over --endpoints), waits until all are created
(extra: create_seconds), then --clients writers (default 4 here), each
waiting for its put before the next, put values carrying the writer's
sequence number and the send time, at --rate in all. It checks that every
watcher received every acknowledged put exactly once, each writer's
numbers in order and revisions ascending (extra: missing, duplicate,
out_of_order, revision_not_increasing, anomalies) and exits non-zero when
anomalies > 0.`,
		Example: `  dkv bench put --clients 64 --value-size 256 --duration 15s
  dkv bench get --serializable -o json
  dkv bench mixed --read-ratio 0.9 --total 100000
  dkv bench lease-keepalive --keys 1000 --clients 64
  dkv bench watch --watchers 100 --clients 8
  dkv bench watch-fanout --watchers 100000 --watch-conns 1000 --rate 10 --duration 60s
  dkv bench ratelimit --keys 1 --clients 16`,
	}
	pf := cmd.PersistentFlags()
	pf.IntVar(&o.Clients, "clients", 64, "concurrent clients (goroutines)")
	pf.IntVar(&o.Conns, "conns", 8, "gRPC connections shared round-robin by the clients")
	pf.StringVar(&o.Route, "route", bench.RouteLeader, "leader: writes and lease keep-alive streams go to the leader (found at setup), reads and watches spread, as DKV's Go client routes; spread: every connection spread over the endpoints, followers forward writes (what etcd's clientv3 does)")
	pf.DurationVar(&duration, "duration", 10*time.Second, "how long to run (ignored with --total unless also given)")
	pf.Int64Var(&o.Total, "total", 0, "stop after this many ops")
	pf.Float64Var(&o.Rate, "rate", 0, "cap on ops/s across all clients (0: unlimited)")
	pf.IntVar(&o.Keys, "keys", 100000, "key space size")
	pf.IntVar(&o.ValueSize, "value-size", 256, "value size in bytes")
	pf.Float64Var(&o.ReadRatio, "read-ratio", 0.9, "mixed: fraction of ops that are reads")
	pf.BoolVar(&o.Serializable, "serializable", false, "serializable (local, possibly stale) reads instead of linearizable")
	pf.BoolVar(&o.Sessions, "sessions", false, "put and counter: send each worker's writes in a client session, as the Go client does (exactly-once writes), to measure what sessions cost")
	pf.StringVar(&o.KeyPrefix, "key-prefix", "bench/", "prefix of every key the benchmark touches")
	pf.IntVar(&o.Watchers, "watchers", 100, "watch: number of watches on the prefix (multiplexed over one stream per connection)")
	pf.IntVar(&o.WatchConns, "watch-conns", 100, "watch-fanout: connections the watchers are spread over (one Watch stream each, round-robin over the endpoints)")
	pf.Int64Var(&o.RateLimit, "rate-limit", 1_000_000, "ratelimit: the bucket's tokens per second")
	pf.Int64Var(&o.RateBurst, "rate-burst", 1000, "ratelimit: the bucket's capacity")
	pf.BoolVar(&o.QueueAckClaim, "queue-ack-claim", false, "queue, with --queue-batch: consumers call AckClaimBatch (the last batch's acks and the next claim in one call)")
	pf.IntVar(&o.QueueBatch, "queue-batch", 0, "queue: jobs per call (0 or 1: Enqueue, Claim, Ack one job; N: EnqueueBatch N, ClaimBatch up to N, AckBatch; at most 64)")
	pf.BoolVar(&o.NoPreload, "no-preload", false, "get, mixed: do not write the key space first")
	pf.Uint64Var(&o.Seed, "seed", 0, "random seed for key choice (0: from the clock)")
	pf.DurationVar(&o.OpTimeout, "op-timeout", 10*time.Second, "time limit for one op; a timed-out op counts as DeadlineExceeded")
	pf.BoolVarP(&quiet, "quiet", "q", false, "no progress line")

	for _, name := range bench.WorkloadNames() {
		cmd.AddCommand(&cobra.Command{
			Use:   name,
			Short: bench.WorkloadDoc(name),
			Args:  Args(cobra.NoArgs),
			RunE: func(c *cobra.Command, _ []string) error {
				o := o // the flags stay untouched for a second Execute
				o.Workload = name
				o.Duration = duration
				if name == "watch-fanout" && !c.Flags().Changed("clients") {
					o.Clients = 4 // writers: a few reach --rate 10 at 100 ms a put, and each keeps order with its own numbers
				}
				if o.Total > 0 && !c.Flags().Changed("duration") {
					o.Duration = 0
				}
				o.Endpoints = splitEndpoints(a.endpoints)
				if len(o.Endpoints) == 0 {
					return Usagef("--endpoints is empty")
				}
				if o.Clients < 1 || o.Conns < 1 || o.Keys < 1 || o.ValueSize < 0 || o.Total < 0 || o.Duration < 0 ||
					o.ReadRatio < 0 || o.ReadRatio > 1 || o.Rate < 0 || o.Watchers < 0 {
					return Usagef("--clients, --conns and --keys must be >= 1; --value-size, --total, --duration and --rate >= 0; --read-ratio in [0, 1]")
				}
				if o.Duration == 0 && o.Total == 0 {
					return Usagef("set --duration or --total")
				}
				if o.Route != bench.RouteLeader && o.Route != bench.RouteSpread {
					return Usagef("--route must be leader or spread, got %q", o.Route)
				}
				o.Warn = a.stderr
				if !quiet {
					o.Progress = a.stderr
				}
				user, pw, err := a.credentials()
				if err != nil {
					return err
				}
				if a.tls.cfg != nil || user != "" {
					o.Dial = a.benchDial(user, pw)
				}
				return a.runBench(o)
			},
		})
	}
	return cmd
}

func (a *App) runBench(o bench.Options) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := bench.Bench(ctx, o)
	if res == nil {
		return err
	}
	interrupted := errors.Is(err, context.Canceled)
	if err != nil && !interrupted {
		return err
	}
	if interrupted {
		fmt.Fprintln(a.stderr, "interrupted: the result covers the ops completed so far")
	}
	var werr error
	if a.JSON() {
		werr = res.WriteJSON(a.stdout)
	} else {
		werr = res.WriteText(a.stdout)
	}
	if werr != nil {
		return werr
	}
	if interrupted {
		return err
	}
	return bench.FanoutAnomalies(res)
}

func splitEndpoints(s string) []string {
	var eps []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	return eps
}
