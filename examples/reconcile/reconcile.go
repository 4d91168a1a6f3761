package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/concurrency"
	"github.com/dkv-io/dkv/client/recipe"
	"github.com/dkv-io/dkv/examples/internal/exenv"
)

// Config is one run of the scenario.
type Config struct {
	Prefix string        // desired state under Prefix+"desired/", actual under Prefix+"actual/"
	TTL    time.Duration // the controllers' session TTL: how long a dead leader keeps leading
	Kill   bool          // kill the leader in the middle of round 1
	Log    *exenv.Log
}

// Action is one action a controller took.
type Action struct {
	Round      int
	Controller string
	What       string // "stop alt-1", "update web-1 v2", "start web-3 v2"
	Err        error  // nil: applied
}

// Report is what happened.
type Report struct {
	// Applied are the actions the store accepted, per round (1-3).
	Applied map[int][]string
	// All is every action attempted, in order, refused ones included.
	All []Action
	// Killed is the controller killed mid-round, Survivor the other.
	Killed, Survivor string
	// LateWrite is what the killed controller's write, sent after its
	// death was noticed by everyone but itself, got.
	LateWrite error
}

var (
	desiredState = map[string]string{"web-1": "v2", "web-2": "v2", "web-3": "v2"}
	actualState  = map[string]string{"alt-1": "v1", "web-1": "v1", "web-2": "v2"}
)

type controller struct {
	name string
	c    *client.Client
	s    *concurrency.Session
	r    *recipe.Reconciler
	done chan error
}

type scenario struct {
	cfg             Config
	env             *exenv.Env
	desired, actual string
	ctx             context.Context // the scenario's: a dead controller's late write waits within it

	mu      sync.Mutex
	round   int
	leader  *controller // the last controller seen reconciling
	killed  bool
	actions []Action
	rep     Report
}

// Run plays the scenario on env and returns what happened.
func Run(ctx context.Context, env *exenv.Env, cfg Config) (*Report, error) {
	sc := &scenario{cfg: cfg, env: env, desired: cfg.Prefix + "desired/", actual: cfg.Prefix + "actual/", round: 1}
	log := cfg.Log
	log.Say("Desired state: %s", show(desiredState))
	log.Say("Actual state:  %s", show(actualState))
	log.Say("Two controllers, ctl-a and ctl-b, campaign; the leader watches both and reconciles")
	log.Say("each changed key; its writes are fenced by its leadership.\n")
	for k, v := range desiredState {
		if _, err := env.Client.Put(ctx, sc.desired+k, []byte(v)); err != nil {
			return nil, err
		}
	}
	for k, v := range actualState {
		if _, err := env.Client.Put(ctx, sc.actual+k, []byte(v)); err != nil {
			return nil, err
		}
	}
	sc.ctx = ctx
	rctx, stop := context.WithCancel(ctx)
	var ctls []*controller
	defer func() {
		stop()
		for _, ct := range ctls {
			<-ct.done
			ct.s.Close()
			ct.c.Close()
		}
	}()
	log.Printf("round 1")
	for _, name := range []string{"ctl-a", "ctl-b"} {
		ct, err := sc.start(rctx, env, name)
		if err != nil {
			return nil, err
		}
		ctls = append(ctls, ct)
	}
	// Round 1 ends when actual equals desired and, if a leader was killed,
	// its late write has been answered.
	if err := exenv.WaitFor(ctx, func() (bool, error) {
		same, err := sc.converged(ctx, env.Client)
		sc.mu.Lock()
		defer sc.mu.Unlock()
		return same && (!cfg.Kill || sc.rep.Survivor != "" && sc.rep.LateWrite != nil), err
	}); err != nil {
		return nil, err
	}
	leader := func() *controller { sc.mu.Lock(); defer sc.mu.Unlock(); return sc.leader }
	if err := leader().r.Sync(ctx); err != nil {
		return nil, err
	}
	sc.setRound(2)
	log.Printf("round 2 (nothing changed)")
	if err := leader().r.Sync(ctx); err != nil {
		return nil, err
	}
	sc.setRound(3)
	log.Printf("round 3: web-2 crashes (its actual state disappears)")
	if _, err := env.Client.Delete(ctx, sc.actual+"web-2"); err != nil {
		return nil, err
	}
	if err := leader().r.Sync(ctx); err != nil {
		return nil, err
	}
	return sc.report(), nil
}

func (sc *scenario) setRound(n int) {
	sc.mu.Lock()
	sc.round = n
	sc.mu.Unlock()
}

// start runs one controller: its own client, session and Reconciler.
func (sc *scenario) start(ctx context.Context, env *exenv.Env, name string) (*controller, error) {
	c, err := env.NewClient(ctx)
	if err != nil {
		return nil, err
	}
	s, err := concurrency.NewSession(ctx, c, concurrency.WithTTL(sc.cfg.TTL))
	if err != nil {
		c.Close()
		return nil, err
	}
	ct := &controller{name: name, c: c, s: s, done: make(chan error, 1)}
	ct.r, err = recipe.NewReconciler(c, s, recipe.ReconcilerConfig{
		Election: sc.cfg.Prefix + "leader", DesiredPrefix: sc.desired, ActualPrefix: sc.actual,
		Workers: 1, // one key at a time, so the account reads in order
		Reconcile: func(ctx context.Context, key string) (recipe.ReconcileResult, error) {
			return recipe.ReconcileResult{}, sc.reconcile(ctx, ct, key)
		},
	})
	if err != nil {
		s.Close()
		c.Close()
		return nil, err
	}
	go func() { ct.done <- ct.r.Run(ctx) }()
	return ct, nil
}

// reconcile makes key's actual state its desired state: the whole
// controller logic. It reads both states from the leader's caches.
func (sc *scenario) reconcile(ctx context.Context, ct *controller, key string) error {
	sc.mu.Lock()
	sc.leader = ct
	sc.mu.Unlock()
	want, ok := ct.r.Desired(key)
	have, running := ct.r.Actual(key)
	var what string
	var act func(context.Context) error
	switch {
	case !ok && running:
		what = "stop " + key
		act = func(ctx context.Context) error { _, err := ct.r.Delete(ctx, sc.actual+key); return err }
	case ok && !running:
		what = fmt.Sprintf("start %s %s", key, want.Value)
	case ok && string(have.Value) != string(want.Value):
		what = fmt.Sprintf("update %s %s", key, want.Value)
	default:
		return nil // in order
	}
	if act == nil {
		act = func(ctx context.Context) error { _, err := ct.r.Put(ctx, sc.actual+key, want.Value); return err }
	}
	if sc.killHere(ct) {
		return sc.die(ctx, ct, what, act)
	}
	err := act(ctx)
	sc.record(ct, what, err)
	return err
}

// killHere says whether ct is to die now: the first leader, at its
// second action of round 1.
func (sc *scenario) killHere(ct *controller) bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if !sc.cfg.Kill || sc.killed || sc.round != 1 || len(sc.actions) != 1 {
		return false
	}
	sc.killed = true
	return true
}

// die is the fault: the leader stops dead in the middle of an action,
// keep-alives and all. The other controller takes over once its session
// expires and finishes the round. Then the dead one's action, as if its
// process had only been frozen, is sent after all, with its old
// leadership.
func (sc *scenario) die(ctx context.Context, ct *controller, what string, act func(context.Context) error) error {
	log := sc.cfg.Log
	log.Printf("%s is killed in the middle of %q (no more keep-alives)", ct.name, what)
	ct.s.Orphan()
	// The leadership's ctx ends now; a frozen process would not notice.
	late, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	ctx = sc.ctx
	var survivor string
	err := exenv.WaitFor(ctx, func() (bool, error) {
		sc.mu.Lock()
		defer sc.mu.Unlock()
		if sc.leader != ct {
			survivor = sc.leader.name
		}
		return survivor != "" && len(sc.actions) > 1, nil
	})
	if err == nil {
		err = exenv.WaitFor(ctx, func() (bool, error) { return sc.converged(ctx, ct.c) })
	}
	if err != nil {
		return err
	}
	log.Printf("%s's %q, sent late by a process that did not know it was dead:", ct.name, what)
	err = act(late)
	sc.record(ct, what, err)
	sc.mu.Lock()
	sc.rep.Killed, sc.rep.Survivor, sc.rep.LateWrite = ct.name, survivor, err
	if err == nil {
		sc.rep.LateWrite = errors.New("accepted: the action was applied twice")
	}
	sc.mu.Unlock()
	return err
}

func (sc *scenario) record(ct *controller, what string, err error) {
	sc.mu.Lock()
	a := Action{Round: sc.round, Controller: ct.name, What: what, Err: err}
	sc.actions = append(sc.actions, a)
	sc.mu.Unlock()
	if err != nil {
		sc.cfg.Log.Printf("  %s: %s REFUSED: %v", ct.name, what, err)
	} else {
		sc.cfg.Log.Printf("  %s: %s", ct.name, what)
	}
}

// converged says whether the actual state equals the desired state.
func (sc *scenario) converged(ctx context.Context, c *client.Client) (bool, error) {
	read := func(p string) (map[string]string, error) {
		r, err := c.List(ctx, p)
		if err != nil {
			return nil, err
		}
		m := map[string]string{}
		for _, kv := range r.KVs {
			m[strings.TrimPrefix(kv.Key, p)] = string(kv.Value)
		}
		return m, nil
	}
	d, err := read(sc.desired)
	if err != nil {
		return false, err
	}
	a, err := read(sc.actual)
	if err != nil {
		return false, err
	}
	return maps.Equal(d, a), nil
}

func (sc *scenario) report() *Report {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	rep := sc.rep
	rep.All = sc.actions
	rep.Applied = map[int][]string{1: {}, 2: {}, 3: {}}
	for _, a := range sc.actions {
		if a.Err == nil {
			rep.Applied[a.Round] = append(rep.Applied[a.Round], a.What)
		}
	}
	log := sc.cfg.Log
	log.Say("\nActions applied, per round:")
	for r := 1; r <= 3; r++ {
		log.Say("  round %d: [%s]", r, strings.Join(rep.Applied[r], ", "))
	}
	if rep.Killed != "" {
		log.Say("%s was killed in round 1, %s finished the round; the dead leader's late write: %v",
			rep.Killed, rep.Survivor, rep.LateWrite)
	}
	log.Say("Keys: %s. %s", sc.cfg.Prefix, sc.env.Afterwards("read them", "get", sc.cfg.Prefix, "--prefix"))
	return &rep
}

func show(m map[string]string) string {
	var s []string
	for _, k := range sort.StringSlice(slicesKeys(m)) {
		s = append(s, k+" "+m[k])
	}
	return "{" + strings.Join(s, ", ") + "}"
}

func slicesKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
