package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/concurrency"
	"github.com/dkv-io/dkv/client/recipe"
	"github.com/dkv-io/dkv/examples/internal/exenv"
)

// The keys of the process mode, under the prefix:
//
//	desired/NAME        the version NAME should run (written by you)
//	actual/NAME         "starting V UNTIL-MS": a start the leader decided on,
//	                    without lease, until the child takes it over;
//	                    "running V pid=PID": written by the child itself,
//	                    with its own lease, so it disappears when the
//	                    child dies
//	actions/INSTANCE-N  one key per action a leader took, written in the
//	                    same fenced transaction as the action's state change
//	leader              the election
//
// Actual state is what the children report, not what the leader believes
// it started: a child killed with SIGKILL stops keeping its lease alive,
// its key expires, and the leader sees the divergence.
const (
	desiredDir = "desired/"
	actualDir  = "actual/"
	actionsDir = "actions/"
)

// startTimeout is how long a child has to take over its "starting" key;
// after that the leader starts it again (the first one cannot register
// any more: its registration is conditional on the key being unchanged).
const startTimeout = 10 * time.Second

// InstanceConfig is one reconciler process.
type InstanceConfig struct {
	Name   string
	Prefix string
	TTL    time.Duration // the session's: how long a dead leader keeps leading, and a dead child its registration
	// FreezeBefore, if positive, stops this process with SIGSTOP right
	// before the transaction of its FreezeBefore-th action: the transaction
	// is sent when it is continued (SIGCONT), late, with the leadership
	// and the state it read before.
	FreezeBefore int
	// CrashAfter, if positive, kills this process with SIGKILL right after
	// its CrashAfter-th action (the child started, if the action starts
	// one): the fault of the scenario, at an exact point.
	CrashAfter int
	// StartDelay is how long this instance's children take to come up
	// (a slow service): they register that long after they start.
	StartDelay time.Duration
	ChildArgs  []string // connection flags for the children
	// Ev prints the instance's event lines (exenv.Events).
	Ev *exenv.Events
}

// state is an actual/NAME value, parsed.
type state struct {
	running bool
	version string
	until   time.Time // of a start
	pid     int
}

func parseState(v []byte) (state, bool) {
	f := strings.Fields(string(v))
	switch {
	case len(f) == 3 && f[0] == "starting":
		ms, err := strconv.ParseInt(f[2], 10, 64)
		return state{version: f[1], until: time.UnixMilli(ms)}, err == nil
	case len(f) == 3 && f[0] == "running" && strings.HasPrefix(f[2], "pid="):
		pid, err := strconv.Atoi(strings.TrimPrefix(f[2], "pid="))
		return state{running: true, version: f[1], pid: pid}, err == nil
	}
	return state{}, false
}

type instance struct {
	cfg InstanceConfig
	c   *client.Client
	r   *recipe.Reconciler
	exe string

	actions atomic.Int64 // numbers the action keys
	done    int          // actions taken (reconciles run one at a time)
	mu      sync.Mutex
	term    int64 // the leadership last seen reconciling
}

// RunInstance runs one reconciler process until ctx ends: it campaigns,
// and while it leads, makes the children match the desired state. On
// return it has resigned and revoked its session; the children it started
// keep running (they are the services; the next leader adopts them).
func RunInstance(ctx context.Context, c *client.Client, cfg InstanceConfig) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	in := &instance{cfg: cfg, c: c, exe: exe}
	for {
		err := in.session(ctx)
		if ctx.Err() != nil {
			cfg.Ev.Emit("resigned", "session", "revoked")
			return nil
		}
		if !errors.Is(err, client.ErrLeaseExpired) && !errors.Is(err, client.ErrLeaseNotFound) {
			return err
		}
		// Frozen (SIGSTOP) or cut off for longer than the TTL: whatever
		// this process was doing as leader has been refused since; it
		// starts over as a candidate.
		cfg.Ev.Emit("lost-session", "err", err, "then", "campaigning again with a new one")
	}
}

// session campaigns and reconciles on one session until ctx ends or the
// session is lost.
func (in *instance) session(ctx context.Context) error {
	cfg := in.cfg
	s, err := concurrency.NewSession(ctx, in.c, concurrency.WithTTL(cfg.TTL))
	if err != nil {
		return err
	}
	defer s.Close()
	in.r, err = recipe.NewReconciler(in.c, s, recipe.ReconcilerConfig{
		Election:      cfg.Prefix + "leader",
		DesiredPrefix: cfg.Prefix + desiredDir,
		ActualPrefix:  cfg.Prefix + actualDir,
		Workers:       1, // one action at a time, so the log reads in order
		Reconcile:     in.reconcile,
		OnRequeue: func(key string, after time.Duration, err error) {
			if err != nil {
				cfg.Ev.Emit("requeued", "key", key, "after", after.Round(time.Millisecond), "err", err)
			}
		},
	})
	if err != nil {
		return err
	}
	cfg.Ev.Emit("campaigning", "election", cfg.Prefix+"leader", "ttl", cfg.TTL)
	return in.r.Run(ctx)
}

// reconcile makes NAME's child match its desired version: the whole
// controller logic, one action at most per call.
func (in *instance) reconcile(ctx context.Context, name string) (recipe.ReconcileResult, error) {
	h, _ := recipe.Fence(ctx)
	in.mu.Lock()
	if in.term != h.Token {
		in.term = h.Token
		in.cfg.Ev.Emit("leader", "term", h.Token)
	}
	in.mu.Unlock()
	want, desired := in.r.Desired(name)
	have, present := in.r.Actual(name)
	var st state
	if present {
		var ok bool
		if st, ok = parseState(have.Value); !ok {
			return recipe.ReconcileResult{}, fmt.Errorf("unreadable actual state %q", have.Value)
		}
	}
	var rev int64 // the actual key's mod revision the action is conditional on (0: absent)
	if present {
		rev = have.ModRevision
	}
	switch {
	case !desired && !present:
		return recipe.ReconcileResult{}, nil
	case !desired:
		return recipe.ReconcileResult{}, in.act(ctx, name, rev, "stop "+name, "")
	case !present:
		return recipe.ReconcileResult{}, in.act(ctx, name, rev, fmt.Sprintf("start %s %s", name, want.Value), string(want.Value))
	case st.version != string(want.Value):
		return recipe.ReconcileResult{}, in.act(ctx, name, rev, fmt.Sprintf("update %s %s", name, want.Value), string(want.Value))
	case !st.running:
		if wait := time.Until(st.until); wait > 0 {
			return recipe.ReconcileResult{RequeueAfter: wait}, nil // a start under way
		}
		return recipe.ReconcileResult{}, in.act(ctx, name, rev, fmt.Sprintf("start %s %s (the last start's child never came up)", name, want.Value), string(want.Value))
	}
	return recipe.ReconcileResult{}, nil // in order
}

// errChanged: the actual state changed under the action, or the
// leadership was lost; the key is looked at again.
var errChanged = errors.New("refused: the actual state changed or the leadership was lost")

// act takes one action, in one transaction fenced by the leadership and
// conditional on the actual key being as read: the state change (the
// "starting" key, or the deletion that makes a child exit) and its record
// under actions/. A start or an update then starts the child, which takes
// the "starting" key over.
func (in *instance) act(ctx context.Context, name string, rev int64, what, version string) error {
	h, ok := recipe.Fence(ctx)
	if !ok {
		return recipe.ErrNotFenced
	}
	p := in.cfg.Prefix
	key := p + actualDir + name
	n := in.actions.Add(1)
	record := client.OpPut(fmt.Sprintf("%s%s%s-%d-%d", p, actionsDir, in.cfg.Name, h.Token, n), []byte(in.cfg.Name+" "+what))
	var change client.Op
	if version == "" {
		change = client.OpDelete(key)
	} else {
		until := time.Now().Add(startTimeout).UnixMilli()
		change = client.OpPut(key, []byte(fmt.Sprintf("starting %s %d", version, until)))
	}
	tctx := ctx
	if in.done+1 == in.cfg.FreezeBefore {
		in.cfg.Ev.Emit("freezing", "before_action", in.done+1, "action", what, "why", "--freeze-before")
		// kill returns before every thread has stopped: wait for the
		// SIGCONT, or this thread could send the write first.
		cont := make(chan os.Signal, 1)
		signal.Notify(cont, syscall.SIGCONT)
		_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		<-cont
		signal.Stop(cont)
		in.cfg.Ev.Emit("continued", "action", what, "then", "sending it as decided before the freeze")
		// A process frozen between deciding and writing does not look
		// at its leadership again: only the store's fence can refuse it.
		var cancel context.CancelFunc
		tctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
	}
	res, err := in.c.Txn(tctx).If(client.LockHeld(h), client.ModRevision(key).Equal(rev)).Then(change, record).Commit()
	if err != nil {
		in.cfg.Ev.Emit("action-failed", "action", what, "err", err)
		return err
	}
	if !res.Succeeded {
		in.cfg.Ev.Emit("refused", "action", what, "err", errChanged)
		return errChanged
	}
	in.r.Wrote(ctx, res.Revision)
	if version == "" {
		in.cfg.Ev.Emit("action", "action", what, "term", h.Token, "note", "its child exits when its key goes")
	} else if pid, err := in.startChild(name, version, res.Revision); err != nil {
		// The "starting" key stays: after startTimeout, a new start.
		in.cfg.Ev.Emit("action", "action", what, "term", h.Token, "child_err", err)
	} else {
		in.cfg.Ev.Emit("action", "action", what, "term", h.Token, "child", pid)
	}
	if in.done++; in.done == in.cfg.CrashAfter {
		in.cfg.Ev.Emit("crashing", "after_action", in.done, "why", "--crash-after")
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	return nil
}

// startChild starts this binary in --child mode. The child gets a session
// of its own (setsid): it outlives this process, and a Ctrl-C meant for
// the reconciler does not reach it. Its output goes where ours does: its
// event lines, under its own name and pid, among ours.
func (in *instance) startChild(name, version string, rev int64) (int, error) {
	args := append([]string{"--child", name, "--version", version, "--intent-rev", strconv.FormatInt(rev, 10),
		"--prefix", in.cfg.Prefix, "--ttl", in.cfg.TTL.String(),
		"--start-delay", in.cfg.StartDelay.String()}, in.cfg.ChildArgs...)
	cmd := exec.Command(in.exe, args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	go func() { _ = cmd.Wait() }() // reap it while we live; init does after
	return cmd.Process.Pid, nil
}

// ChildConfig is one child process: a stand-in for a service at a version.
type ChildConfig struct {
	Name, Version, Prefix string
	IntentRev             int64 // the "starting" key's revision it takes over
	TTL                   time.Duration
	StartDelay            time.Duration // before it registers
	Ev                    *exenv.Events
}

// RunChild registers the child as running, if its start is still the
// current one, and blocks until its key is changed or deleted (a stop or
// an update), its session is lost, or ctx ends (SIGTERM: it revokes its
// session, which deletes its key, and exits).
func RunChild(ctx context.Context, c *client.Client, cfg ChildConfig) error {
	s, err := concurrency.NewSession(ctx, c, concurrency.WithTTL(cfg.TTL))
	if err != nil {
		return err
	}
	defer s.Close()
	if cfg.StartDelay > 0 {
		cfg.Ev.Emit("coming-up", "version", cfg.Version, "in", cfg.StartDelay)
		select {
		case <-time.After(cfg.StartDelay):
		case <-ctx.Done():
			return nil
		}
	}
	key := cfg.Prefix + actualDir + cfg.Name
	val := fmt.Sprintf("running %s pid=%d", cfg.Version, os.Getpid())
	res, err := c.Txn(ctx).If(client.ModRevision(key).Equal(cfg.IntentRev)).
		Then(client.OpPut(key, []byte(val), client.WithLease(s.Lease()))).Commit()
	if err != nil {
		return err
	}
	if !res.Succeeded {
		cfg.Ev.Emit("exiting", "version", cfg.Version, "why", "my start was superseded")
		return nil
	}
	cfg.Ev.Emit("running", "version", cfg.Version)
	w, err := c.WatchKey(ctx, key, client.WithStartRevision(res.Revision+1))
	if err != nil {
		return err
	}
	defer w.Stop()
	for {
		select {
		case b, ok := <-w.Events():
			if !ok {
				return fmt.Errorf("child %s %s: watch ended: %w", cfg.Name, cfg.Version, w.Err())
			}
			if len(b.Events) > 0 {
				e := b.Events[len(b.Events)-1]
				why := "stopped"
				if e.Type == client.EventPut {
					why = "replaced: " + string(e.KV.Value)
				}
				cfg.Ev.Emit("exiting", "version", cfg.Version, "why", why)
				return nil
			}
		case <-s.Done():
			cfg.Ev.Emit("exiting", "version", cfg.Version, "why", fmt.Sprintf("lost my registration (%v)", s.Err()))
			return nil
		case <-ctx.Done():
			cfg.Ev.Emit("exiting", "version", cfg.Version, "why", "terminated; deregistering")
			return nil
		}
	}
}
