package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dkv-io/dkv/internal/bench/runner"
)

// keyPrefix and key match internal/bench's key layout, so both systems
// hold the same keys and values.
const keyPrefix = "bench/"

func key(n int) string { return keyIn(keyPrefix, n) }

// keyIn is key n under prefix, as dkv bench's --key-prefix lays it out.
func keyIn(prefix string, n int) string {
	s := strconv.Itoa(n)
	return prefix + strings.Repeat("0", max(0, 10-len(s))) + s
}

func value(r *rand.Rand, n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[r.IntN(len(alphabet))]
	}
	return string(b)
}

// runDKV starts the DKV cluster and runs each workload through `dkv bench
// -o json`.
func runDKV(ctx context.Context, c config, bin, dir string) ([]measurement, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if out, err := exec.Command(bin, "bench", "--help").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s has no bench command (is it registered in internal/cli/root.go?): %v\n%s", bin, err, out)
	}
	cl, err := startDKV(bin, dir, c.nodes)
	if err != nil {
		return nil, err
	}
	defer cl.stop()
	eps := strings.Join(cl.endpoints, ",")
	err = cl.waitReady(ctx, func(ctx context.Context, i int) error {
		// /readyz says the member is up; a write through it says the
		// cluster has a leader and commits.
		args := []string{"--endpoints", cl.endpoints[i], "--timeout", "2s"}
		if err := httpReady(ctx, "http://"+httpAddrOf(cl, i)+"/readyz"); err != nil {
			return err
		}
		out, err := exec.CommandContext(ctx, bin, append([]string{"put", "compare/ready", "1"}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, bytes.TrimSpace(out))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "dkv: %d node(s) ready at %s\n", c.nodes, eps)

	out := measureIdle(ctx, cl, "dkv", c.idle)
	for _, w := range c.jobs("dkv") {
		jc := w.apply(c)
		clients, conns := w.params(jc)
		args := []string{"-o", "json",
			"--endpoints", eps,
			"--conns", strconv.Itoa(conns),
			"--keys", strconv.Itoa(w.keys(jc)),
			"--value-size", strconv.Itoa(jc.valueSize),
			"--key-prefix", jc.prefix,
		}
		m := measurement{Workload: w.name, Curve: w.curve, X: w.x, System: "dkv"}
		// get and mixed preload the key space; a first pass of one op
		// does that, so the measured pass (and its CPU figure) finds it
		// full and only runs the load.
		if w.op == "get" || w.op == "mixed" {
			pre := append([]string{"bench", "get", "--total", "1", "--clients", "64", "--quiet"}, args...)
			fmt.Fprintf(os.Stderr, "\n== dkv %s preload: %s %s\n", w.name, bin, strings.Join(pre, " "))
			if err := dkvPreload(ctx, bin, pre, w.keys(jc)); err != nil {
				m.Err = "preload: " + err.Error()
				report(m)
				out = append(out, m)
				continue
			}
		}
		args = append([]string{"bench", w.op}, append(args,
			"--clients", strconv.Itoa(clients),
			"--duration", jc.duration.String())...)
		if jc.dkvRoute != "" {
			args = append(args, "--route", jc.dkvRoute)
		}
		if w.op == "get" || w.op == "mixed" {
			// Preloaded above: the measured pass skips even the count
			// that finds the key space full, which over 10M keys takes
			// seconds of server CPU the row would be charged for.
			args = append(args, "--no-preload")
		}
		if w.serializable {
			args = append(args, "--serializable")
		}
		if w.op == "mixed" {
			args = append(args, "--read-ratio", strconv.FormatFloat(jc.readRatio, 'g', -1, 64))
		}
		if w.op == "watch" {
			args = append(args, "--watchers", strconv.Itoa(jc.watchers))
		}
		fmt.Fprintf(os.Stderr, "\n== dkv %s: %s %s\n", w.name, bin, strings.Join(args, " "))
		// Bound the subprocess: the run, a preload, and the per-op
		// timeouts of a cluster that stopped answering.
		rctx, cancel := context.WithTimeout(ctx, jc.duration+3*time.Minute)
		cmd := exec.CommandContext(rctx, bin, args...)
		var stdout bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
		meter := startMeter(cl)
		err := cmd.Run()
		m.Server = meter.stop()
		if cmd.ProcessState != nil {
			m.ClientCPUSeconds = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
		}
		if err != nil {
			m.Err = err.Error()
		} else {
			var res runner.Result
			if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
				m.Err = fmt.Sprintf("parse dkv bench output: %v: %q", err, stdout.String())
			} else {
				m.Result = &res
			}
		}
		cancel()
		report(m)
		out = append(out, m)
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
	}
	if c.restart {
		// The get-big key space (a get pass of one op preloads it, as
		// above), then one member restarted over it.
		pre := []string{"bench", "get", "--total", "1", "--clients", "64", "--quiet", "--endpoints", eps,
			"--keys", strconv.Itoa(c.bigKeys), "--value-size", strconv.Itoa(c.valueSize), "--key-prefix", bigPrefix}
		fmt.Fprintf(os.Stderr, "\n== dkv restart preload: %s %s\n", bin, strings.Join(pre, " "))
		if err := dkvPreload(ctx, bin, pre, c.bigKeys); err != nil {
			return append(out, measurement{Workload: restartWorkload, System: "dkv", Err: "preload: " + err.Error()}), nil
		}
		out = append(out, measureRestart(ctx, c, cl, "dkv", dkvProbe))
	}
	return out, nil
}

// dkvPreload runs a `dkv bench get` pass that preloads a key space of
// keys keys, bounded by preloadBound. A pass cut off by its bound (or a
// failed call) is run again, up to three times in all: the preload goes
// on from where the last one stopped.
func dkvPreload(ctx context.Context, bin string, args []string, keys int) error {
	var err error
	for attempt := range 3 {
		if attempt > 0 {
			fmt.Fprintf(os.Stderr, "preload pass %d failed (%v); again, from where it stopped\n", attempt, err)
		}
		pctx, cancel := context.WithTimeout(ctx, preloadBound(keys))
		cmd := exec.CommandContext(pctx, bin, args...)
		cmd.Stderr = os.Stderr
		err = cmd.Run()
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// preloadBound is one preload pass's time: 10 minutes, plus a second per
// 5,000 keys (a 3-node DKV cluster preloaded about 7,600 keys/s on a
// shared machine; 10M keys get 43 minutes a pass).
func preloadBound(keys int) time.Duration {
	return 10*time.Minute + time.Duration(keys/5000)*time.Second
}

// httpAddrOf is member i's HTTP address: startDKV allocates client, peer
// and HTTP ports in that order, and prints them; we recover it from the
// member's command line.
func httpAddrOf(cl *cluster, i int) string {
	args := cl.procs[i].cmd.Args
	for j := range args[:len(args)-1] {
		if args[j] == "--http-addr" {
			return args[j+1]
		}
	}
	return ""
}

// runEtcd starts an etcd cluster of bin and runs each workload in this
// process through clientv3, as system name (etcd, etcd37); restart adds
// the restart row.
func runEtcd(ctx context.Context, c config, name, bin, dir string, restart bool) ([]measurement, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	cl, err := startEtcd(bin, dir, c.nodes)
	if err != nil {
		return nil, err
	}
	defer cl.stop()
	return runClientv3(ctx, c, cl, name, restart)
}

// runDKVEtcd starts a DKV cluster and runs each workload through its
// etcd API with the same clientv3 harness runEtcd drives etcd with: the
// "DKV etcd API" column. The restart row is left to the dkv column.
func runDKVEtcd(ctx context.Context, c config, bin, dir string) ([]measurement, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	cl, err := startDKV(bin, dir, c.nodes)
	if err != nil {
		return nil, err
	}
	defer cl.stop()
	return runClientv3(ctx, c, cl, "dkv-etcd", false)
}

// runClientv3 runs every workload against the started cluster cl through
// clientv3, as system name; restart adds the restart row.
func runClientv3(ctx context.Context, c config, cl *cluster, name string, restart bool) ([]measurement, error) {
	// One client per "connection", each pinned to one member, like DKV's
	// connections spread round-robin over the endpoints.
	clients := make([]*clientv3.Client, c.conns)
	defer func() {
		for _, cli := range clients {
			if cli != nil {
				cli.Close()
			}
		}
	}()
	for i := range clients {
		cli, err := clientv3.New(clientv3.Config{
			Endpoints:   []string{cl.endpoints[i%len(cl.endpoints)]},
			DialTimeout: 5 * time.Second,
			Logger:      zap.NewNop(),
		})
		if err != nil {
			return nil, cl.failure(err)
		}
		clients[i] = cli
	}
	err := cl.waitReady(ctx, func(ctx context.Context, i int) error {
		_, err := clients[i%len(clients)].Put(ctx, "compare/ready", "1")
		return err
	})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "%s: %d node(s) ready at %s\n", name, c.nodes, strings.Join(cl.endpoints, ","))
	out, err := runInProc(ctx, c, inprocSystem{
		name:      name,
		cluster:   cl,
		endpoints: cl.endpoints,
		classify:  classifyEtcd,
		preload: func(ctx context.Context, c config, w workload, seed uint64) error {
			if w.op == "get" || w.op == "mixed" {
				return etcdPreload(ctx, clients, c.prefix, c.keys, c.valueSize, seed)
			}
			return nil
		},
		workload: func(ctx context.Context, c config, w workload, nconns int, seed uint64) (*sysWorkload, error) {
			return newEtcdWorkload(ctx, w, c, clients[:nconns], seed)
		},
	})
	if err != nil || !restart {
		return out, err
	}
	if err := etcdPreload(ctx, clients, bigPrefix, c.bigKeys, c.valueSize, uint64(time.Now().UnixNano())); err != nil {
		return append(out, measurement{Workload: restartWorkload, System: name, Err: "preload: " + err.Error()}), nil
	}
	return append(out, measureRestart(ctx, c, cl, name, etcdProbe)), nil
}

// inprocSystem is a system driven from this process through its own Go
// client (etcd, ZooKeeper). runInProc runs every workload against it with
// the runner dkv bench uses, so only the ops differ between systems.
type inprocSystem struct {
	name      string
	cluster   *cluster
	endpoints []string
	// preload, if set, fills the key space the row reads, before its
	// server usage is measured.
	preload func(ctx context.Context, c config, w workload, seed uint64) error
	// workload prepares one row, as c (the row's config) says, over the
	// first nconns connections (opening watches, granting leases) and
	// returns its workers, or a notApplicable error when the system has
	// no fair equivalent.
	workload func(ctx context.Context, c config, w workload, nconns int, seed uint64) (*sysWorkload, error)
	// classify names an error for Result.Errors.
	classify func(error) string
}

// sysWorkload is one system's side of one table row: what dkv bench's
// workload of the same name does, through that system's client.
type sysWorkload struct {
	newWorker func(i int) (runner.Worker, error)
	// finish, if set, runs after the load (like internal/bench's
	// Finisher): collects extra metrics and cleans up.
	finish func(ctx context.Context, res *runner.Result) error
}

// notApplicable is a system's answer for a workload it has no fair
// equivalent of; the row shows n/a and the notes say why.
type notApplicable string

func (n notApplicable) Error() string { return "not applicable: " + string(n) }

func runInProc(ctx context.Context, c config, sys inprocSystem) ([]measurement, error) {
	seed := uint64(time.Now().UnixNano())
	out := measureIdle(ctx, sys.cluster, sys.name, c.idle)
	for _, w := range c.jobs(sys.name) {
		jc := w.apply(c)
		nclients, nconns := w.params(jc)
		fmt.Fprintf(os.Stderr, "\n== %s %s: clients=%d conns=%d duration=%s keys=%d value-size=%d serializable=%v\n",
			sys.name, w.name, nclients, nconns, jc.duration, w.keys(jc), jc.valueSize, w.serializable)
		m := measurement{Workload: w.name, Curve: w.curve, X: w.x, System: sys.name}
		if sys.preload != nil {
			if err := sys.preload(ctx, jc, w, seed); err != nil {
				m.Err = "preload: " + err.Error()
				report(m)
				out = append(out, m)
				continue
			}
		}
		// The server usage covers the row's setup, load and cleanup, as
		// the DKV side's one dkv bench process does.
		meter := startMeter(sys.cluster)
		self0 := selfCPU()
		sw, err := sys.workload(ctx, jc, w, nconns, seed)
		var na notApplicable
		switch {
		case errors.As(err, &na):
			m.NA = string(na)
		case err != nil:
			m.Err = "setup: " + err.Error()
		default:
			res, err := runner.Run(ctx, runner.RunConfig{
				Workload: w.op,
				System:   sys.name,
				Clients:  nclients,
				Duration: jc.duration,
				Progress: os.Stderr,
				Classify: sys.classify,
			}, sw.newWorker)
			if res != nil && err == nil && sw.finish != nil {
				err = sw.finish(ctx, res)
			}
			if err != nil {
				m.Err = err.Error()
			}
			if res != nil {
				res.Conns = nconns
				res.Params = map[string]any{"keys": w.keys(jc), "value_size": jc.valueSize, "endpoints": sys.endpoints, "seed": seed}
				if w.op == "watch" {
					res.Params["watchers"] = jc.watchers
				}
				if w.op == "mixed" {
					res.Params["read_ratio"] = jc.readRatio
				}
				if w.serializable {
					res.Params["serializable"] = true
				}
				m.Result = res
			}
		}
		if m.NA == "" {
			m.Server = meter.stop()
			m.ClientCPUSeconds = (selfCPU() - self0).Seconds()
		} else {
			meter.stop()
		}
		report(m)
		out = append(out, m)
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
	}
	return out, nil
}

// finishWatch waits for the events of the last puts (until none arrived
// for 2s, at most 15s, as dkv bench's watch workload does), stops the
// watchers and puts the event metrics in res.Extra: events delivered vs
// expected (successful puts × watchers), events/s and put→event latency.
func finishWatch(ctx context.Context, res *runner.Result, stats []*runner.EventStats, start time.Time, watchers int, stop func()) {
	expected := res.OK * int64(watchers)
	runner.WaitEvents(ctx, stats, expected, 2*time.Second, 15*time.Second)
	stop()
	runner.FillEventExtra(res, stats, start, watchers, expected)
}

// parallel calls f(worker, j) for every j in [0, n) from up to workers
// goroutines and returns the first error.
func parallel(ctx context.Context, n, workers int, f func(i, j int) error) error {
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		once     sync.Once
		firstErr error
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i := range min(n, workers) {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for {
				j := int(next.Add(1)) - 1
				if j >= n || ctx.Err() != nil {
					return
				}
				if err := f(i, j); err != nil {
					once.Do(func() { firstErr = err; cancel() })
					return
				}
			}
		}(i)
	}
	wg.Wait()
	return firstErr
}

// etcdPreload writes every key once unless the key space is full, as
// internal/bench does for DKV's get workload.
func etcdPreload(ctx context.Context, clients []*clientv3.Client, prefix string, keys, valueSize int, seed uint64) error {
	count := func(ctx context.Context, n int) (int64, error) {
		got, err := clients[0].Get(ctx, keyIn(prefix, 0), clientv3.WithRange(keyIn(prefix, n)), clientv3.WithCountOnly())
		if err != nil {
			return 0, err
		}
		return got.Count, nil
	}
	got, err := count(ctx, keys)
	if err != nil {
		return err
	}
	if got >= int64(keys) {
		return nil
	}
	// Many puts per txn, as internal/bench's preload does for DKV, so a
	// large key space loads in minutes: within etcd's default
	// --max-txn-ops (128) and its 1.5 MiB request limit.
	per := max(1, min(100, (512<<10)/max(1, valueSize)))
	batches := (keys + per - 1) / per
	from := 0
	if got > 0 {
		// Go on from where a preload that was cut off stopped, as
		// internal/bench does.
		from, err = runner.ResumeFrom(ctx, batches, per, func(ctx context.Context, k int) (bool, error) {
			r, err := clients[0].Get(ctx, keyIn(prefix, k), clientv3.WithCountOnly())
			return err == nil && r.Count > 0, err
		}, count)
		if err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "preloading %d keys (%d present; from key %d)\n", keys, got, from*per)
	return parallel(ctx, batches-from, runner.PreloadWindow, func(i, j int) error {
		j += from
		var ops []clientv3.Op
		for k := j * per; k < min((j+1)*per, keys); k++ {
			ops = append(ops, clientv3.OpPut(keyIn(prefix, k), keyValue(seed, k, valueSize)))
		}
		pctx, cancel := context.WithTimeout(ctx, etcdOpTimeout)
		defer cancel()
		_, err := clients[i%len(clients)].Txn(pctx).Then(ops...).Commit()
		return err
	})
}

// keyValue is key j's preloaded value.
func keyValue(seed uint64, j, valueSize int) string {
	return value(rand.New(rand.NewPCG(seed, uint64(j))), valueSize)
}

// classifyEtcd names an etcd client error by its gRPC code, like DKV's
// transport errors.
func classifyEtcd(err error) string {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code().String()
	}
	return runner.ClassifyGRPC(err)
}

func report(m measurement) {
	if m.NA != "" {
		fmt.Fprintf(os.Stderr, "%s %s: n/a: %s\n", m.System, m.Workload, m.NA)
		return
	}
	if m.Err != "" {
		fmt.Fprintf(os.Stderr, "%s %s: FAILED: %s\n", m.System, m.Workload, m.Err)
		return
	}
	r := m.Result
	fmt.Fprintf(os.Stderr, "%s %s: %.0f ops/s, p50 %s, p99 %s, errors %d\n", m.System, m.Workload,
		r.OpsPerSec, runner.FormatLatency(r.Latency.P50), runner.FormatLatency(r.Latency.P99), r.ErrorCount())
	if cpu, ok := m.cpuPer1k(); ok {
		fmt.Fprintf(os.Stderr, "%s %s: servers used %.2f CPU-s in %.1fs, %.1f CPU-ms per 1,000 %s; RSS %d MiB before, %d MiB peak\n", m.System, m.Workload,
			m.Server.CPUSeconds, m.Server.WallSeconds, cpu, m.opUnit(), m.Server.RSSBefore>>20, m.Server.RSSPeak>>20)
	}
	if _, ok := r.Extra["jobs_per_s"]; ok {
		fmt.Fprintf(os.Stderr, "%s %s: %.0f jobs acked, %.0f jobs/s, enqueue→claim p50 %.2fms, p99 %.2fms\n", m.System, m.Workload,
			r.Extra["jobs_acked"], r.Extra["jobs_per_s"], r.Extra["claim_latency_p50_ms"], r.Extra["claim_latency_p99_ms"])
	}
	if _, ok := r.Extra["events"]; ok {
		fmt.Fprintf(os.Stderr, "%s %s: %.0f/%.0f events delivered, %.0f events/s, put→event p50 %.2fms, p99 %.2fms\n", m.System, m.Workload,
			r.Extra["events"], r.Extra["expected_events"], r.Extra["events_per_sec"], r.Extra["event_p50_ms"], r.Extra["event_p99_ms"])
	}
}
