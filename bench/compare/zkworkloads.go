package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dkv-io/dkv/internal/bench/runner"
)

// zkSessionTimeout is the session timeout the ZooKeeper client asks for.
// go-zookeeper's calls take no context: it gives up on a request (and
// reconnects) after 2/3 of the session timeout without a reply, so this is
// a 10s op timeout, like etcdOpTimeout and dkv bench's --op-timeout.
const zkSessionTimeout = 15 * time.Second

// zkBufferSize bounds go-zookeeper's per-connection buffers (1.5 MiB each
// by default, two per connection), which the watch row's hundred sessions
// would otherwise spend on 256-byte values.
const zkBufferSize = 256 << 10

// zkRearmers is how many GetW calls each watcher keeps in flight to re-arm
// the watches that fired.
const zkRearmers = 4

// zkArmers is how many ExistsW calls each watcher keeps in flight while
// the watches are first set. More does not arm faster on 2 cores: with 8
// each (800 in all) the servers fell so far behind that a follower missed
// syncLimit and the ensemble re-elected mid-setup.
const zkArmers = 1

// The znode trees: a key is a znode under zkKeys (/bench/0000000042, as
// DKV's and etcd's key is bench/0000000042), a lock key's lock lives under
// zkLocks, and the watch row writes under zkWatched.
var (
	zkKeys    = "/" + strings.TrimSuffix(keyPrefix, "/")
	zkLocks   = zkKeys + "/lock"
	zkWatched = zkKeys + "/watch"
)

var zkACL = zk.WorldACL(zk.PermAll)

// zkPath is key n's znode under parent.
func zkPath(parent string, n int) string {
	return parent + "/" + key(n)[len(keyPrefix):]
}

// zkLogger is go-zookeeper's logger: quiet while the ensemble starts (the
// client logs every refused connection), then to stderr.
type zkLogger struct{ quiet atomic.Bool }

func (l *zkLogger) Printf(format string, args ...any) {
	if !l.quiet.Load() {
		fmt.Fprintf(os.Stderr, "zk client: "+format+"\n", args...)
	}
}

func zkConnect(server string, log *zkLogger, cb zk.EventCallback) (*zk.Conn, error) {
	conn, _, err := zk.Connect([]string{server}, zkSessionTimeout,
		zk.WithLogger(log),
		zk.WithLogInfo(false),
		zk.WithEventCallback(cb),
		zk.WithMaxBufferSize(zkBufferSize),
		zk.WithMaxConnBufferSize(zkBufferSize))
	return conn, err
}

// zkCreate creates a persistent znode; one that exists is fine.
func zkCreate(conn *zk.Conn, path string, data []byte) error {
	_, err := conn.Create(path, data, 0, zkACL)
	if errors.Is(err, zk.ErrNodeExists) {
		return nil
	}
	return err
}

// zkPut is the put op: SetData, or Create if the znode is absent.
func zkPut(conn *zk.Conn, path string, data []byte) error {
	_, err := conn.Set(path, data, -1)
	if errors.Is(err, zk.ErrNoNode) {
		if _, err = conn.Create(path, data, 0, zkACL); errors.Is(err, zk.ErrNodeExists) {
			_, err = conn.Set(path, data, -1)
		}
	}
	return err
}

// classifyZK names a go-zookeeper error by its message ("node does not
// exist", "connection closed", ...).
func classifyZK(err error) string {
	if msg, ok := strings.CutPrefix(err.Error(), "zk: "); ok {
		return msg
	}
	return runner.ClassifyGRPC(err)
}

// runZooKeeper starts the ZooKeeper ensemble and runs each workload in
// this process through github.com/go-zookeeper/zk.
func runZooKeeper(ctx context.Context, c config, java, classpath, dir string) ([]measurement, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	cl, err := startZooKeeper(java, classpath, dir, c.nodes)
	if err != nil {
		return nil, err
	}
	defer cl.stop()
	// One session per "connection", each pinned to one member, like
	// etcd's clients.
	log := &zkLogger{}
	log.quiet.Store(true)
	conns := make([]*zk.Conn, c.conns)
	defer func() {
		for _, conn := range conns {
			if conn != nil {
				conn.Close()
			}
		}
	}()
	for i := range conns {
		if conns[i], err = zkConnect(cl.endpoints[i%len(cl.endpoints)], log, nil); err != nil {
			return nil, cl.failure(err)
		}
	}
	// A member takes sessions only once it has joined a quorum; a write
	// through it says the ensemble commits.
	err = cl.waitReady(ctx, func(ctx context.Context, i int) error {
		conn := conns[i%len(conns)]
		if st := conn.State(); st != zk.StateHasSession {
			return fmt.Errorf("session %s", st)
		}
		return zkPut(conn, "/compare-ready", []byte("1"))
	})
	if err != nil {
		return nil, err
	}
	log.quiet.Store(false)
	for _, p := range []string{zkKeys, zkLocks, zkWatched} {
		if err := zkCreate(conns[0], p, nil); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(os.Stderr, "zk: %d node(s) ready at %s\n", c.nodes, strings.Join(cl.endpoints, ","))
	z := &zkSystem{c: c, conns: conns, endpoints: cl.endpoints, log: log, created: map[string]bool{}}
	return runInProc(ctx, c, inprocSystem{
		name:      "zk",
		cluster:   cl,
		endpoints: cl.endpoints,
		preload: func(ctx context.Context, c config, w workload, seed uint64) error {
			// What z.workload would create first (once per run), so the
			// znodes are not counted in the row's server usage.
			switch w.op {
			case "put", "get":
				return z.createKeys(ctx, zkKeys, c.valueSize, seed)
			case "lock":
				return z.createKeys(ctx, zkLocks, 0, seed)
			case "watch":
				return z.createKeys(ctx, zkWatched, c.valueSize, seed)
			}
			return nil
		},
		classify: classifyZK,
		workload: z.workload,
	})
}

type zkSystem struct {
	c         config
	conns     []*zk.Conn
	endpoints []string
	log       *zkLogger
	created   map[string]bool // parents whose key space createKeys filled
}

// createKeys creates parent's znode for every key, each holding key n's
// preloaded value (or nothing when valueSize is 0), once per run.
func (z *zkSystem) createKeys(ctx context.Context, parent string, valueSize int, seed uint64) error {
	if z.created[parent] {
		return nil
	}
	fmt.Fprintf(os.Stderr, "creating %d znodes under %s\n", z.c.keys, parent)
	err := parallel(ctx, z.c.keys, 64, func(i, j int) error {
		return zkCreate(z.conns[i%len(z.conns)], zkPath(parent, j), []byte(keyValue(seed, j, valueSize)))
	})
	if err != nil {
		return fmt.Errorf("creating the znodes under %s: %w", parent, err)
	}
	z.created[parent] = true
	return nil
}

func (z *zkSystem) workload(ctx context.Context, c config, w workload, nconns int, seed uint64) (*sysWorkload, error) {
	conns := z.conns[:nconns]
	switch w.op {
	case "put", "get":
		// Put is SetData on the key's znode, as a DKV or etcd put to an
		// existing key; the znodes are created first for both rows so a
		// put never pays for a create.
		if err := z.createKeys(ctx, zkKeys, c.valueSize, seed); err != nil {
			return nil, err
		}
		return &sysWorkload{newWorker: func(i int) (runner.Worker, error) {
			conn := conns[i%nconns]
			r := rand.New(rand.NewPCG(seed, uint64(i)))
			val := []byte(value(r, c.valueSize))
			return runner.WorkerFunc(func(context.Context) error {
				p := zkPath(zkKeys, r.IntN(c.keys))
				if w.op == "put" {
					return zkPut(conn, p, val)
				}
				// A ZooKeeper read is served from the member's own state
				// (sequentially consistent); Sync first makes it see
				// everything committed before the read began.
				if !w.serializable {
					if _, err := conn.Sync(p); err != nil {
						return err
					}
				}
				_, _, err := conn.Get(p)
				return err
			}), nil
		}}, nil
	case "lock":
		// The lock znodes' parents exist beforehand, so an op is only the
		// recipe's create, list and delete.
		if err := z.createKeys(ctx, zkLocks, 0, seed); err != nil {
			return nil, err
		}
		return &sysWorkload{newWorker: func(i int) (runner.Worker, error) {
			conn := conns[i%nconns]
			r := rand.New(rand.NewPCG(seed, uint64(i)))
			return runner.WorkerFunc(func(context.Context) error {
				l := zk.NewLock(conn, zkPath(zkLocks, r.IntN(c.keys)), zkACL)
				if err := l.Lock(); err != nil {
					return err
				}
				return l.Unlock()
			}), nil
		}}, nil
	case "watch":
		return z.watch(ctx, conns, seed)
	case "lease-keepalive":
		return nil, notApplicable("ZooKeeper has sessions, not leases: a session is kept alive by the client's pings to its member, with no keep-alive request to time")
	case "queue":
		return nil, notApplicable("go-zookeeper has no queue recipe (Curator's DistributedQueue is Java)")
	}
	return nil, fmt.Errorf("no ZooKeeper equivalent of workload %q", w.op)
}

// watch is the watch row through one-shot watches: go-zookeeper (v1.0.4)
// has no AddWatch, ZooKeeper 3.6's persistent recursive watch, so each
// watcher keeps a data watch on every znode under the prefix and re-arms
// one with GetW when it fires, the way a TreeCache follows a subtree. Each
// watcher has its own session: a ZooKeeper server keeps one watch per path
// and session, so watchers sharing a session would share one server-side
// watch. The re-arming GetW also reads the value, whose send stamp times
// put→event. A put that lands between a notification and its re-arm is
// seen only as the later value, so events can be coalesced; the table
// reports that as events not delivered.
func (z *zkSystem) watch(ctx context.Context, conns []*zk.Conn, seed uint64) (*sysWorkload, error) {
	c := z.c
	if err := z.createKeys(ctx, zkWatched, c.valueSize, seed); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(context.Background())
	var (
		wg       sync.WaitGroup
		stats    []*runner.EventStats
		sessions []*zk.Conn
		dropped  atomic.Int64 // notifications with no room in fired (never, if one-shot)
		failed   atomic.Int64 // re-arms that failed
	)
	stop := func() {
		cancel()
		for _, s := range sessions {
			s.Close()
		}
		wg.Wait()
	}
	for j := range c.watchers {
		// A path has at most one notification pending per session: its
		// watch is gone until re-armed. So keys slots never fill.
		fired := make(chan string, c.keys)
		s, err := zkConnect(z.endpoints[j%len(z.endpoints)], z.log, func(ev zk.Event) {
			if ev.Type != zk.EventNodeDataChanged {
				return
			}
			select {
			case fired <- ev.Path:
			default:
				dropped.Add(1)
			}
		})
		if err != nil {
			stop()
			return nil, err
		}
		sessions = append(sessions, s)
		for range zkRearmers {
			st := &runner.EventStats{}
			stats = append(stats, st)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-wctx.Done():
						return
					case p := <-fired:
						v, _, _, err := s.GetW(p)
						if err != nil {
							failed.Add(1)
							continue
						}
						st.Record(v, time.Now())
					}
				}
			}()
		}
	}
	fmt.Fprintf(os.Stderr, "arming %d watches (%d watchers × %d znodes)\n", c.watchers*c.keys, c.watchers, c.keys)
	t0 := time.Now()
	err := parallel(ctx, c.watchers*c.keys, c.watchers*zkArmers, func(_, j int) error {
		_, _, _, err := sessions[j%c.watchers].ExistsW(zkPath(zkWatched, j/c.watchers))
		return err
	})
	if err != nil {
		stop()
		return nil, fmt.Errorf("arming watches: %w", err)
	}
	fmt.Fprintf(os.Stderr, "armed in %s\n", time.Since(t0).Round(time.Millisecond))
	start := time.Now()
	return &sysWorkload{
		newWorker: func(i int) (runner.Worker, error) {
			conn := conns[i%len(conns)]
			r := rand.New(rand.NewPCG(seed, uint64(i)))
			filler := []byte(value(r, c.valueSize))
			return runner.WorkerFunc(func(context.Context) error {
				return zkPut(conn, zkPath(zkWatched, r.IntN(c.keys)), runner.StampValue(filler, time.Now()))
			}), nil
		},
		finish: func(ctx context.Context, res *runner.Result) error {
			finishWatch(ctx, res, stats, start, c.watchers, stop)
			if n := failed.Load(); n > 0 {
				res.Extra["watch_rearm_errors"] = float64(n)
			}
			if n := dropped.Load(); n > 0 {
				res.Extra["watch_notifications_dropped"] = float64(n)
			}
			return nil
		},
	}, nil
}
