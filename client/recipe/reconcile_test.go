package recipe_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/concurrency"
	"github.com/dkv-io/dkv/client/recipe"
)

func newSession(t *testing.T, c *client.Client) *concurrency.Session {
	t.Helper()
	s, err := concurrency.NewSession(testCtx(t), c, concurrency.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// runReconciler starts r.Run and stops it at the end of the test.
func runReconciler(t *testing.T, r *recipe.Reconciler) context.CancelFunc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return cancel
}

// deployer is the script: desired versions under d/, running
// instances under a/; it starts, updates and stops instances.
type deployer struct {
	r       *recipe.Reconciler
	mu      sync.Mutex
	actions []string
}

func (d *deployer) reconcile(ctx context.Context, key string) (recipe.ReconcileResult, error) {
	want, wok := d.r.Desired(key)
	have, hok := d.r.Actual(key)
	var action string
	var err error
	switch {
	case !wok && hok:
		action = "stop " + key
		_, err = d.r.Delete(ctx, "a/"+key)
	case wok && !hok:
		action = fmt.Sprintf("start %s %s", key, want.Value)
		_, err = d.r.Put(ctx, "a/"+key, want.Value)
	case wok && string(want.Value) != string(have.Value):
		action = fmt.Sprintf("update %s to %s", key, want.Value)
		_, err = d.r.Put(ctx, "a/"+key, want.Value)
	default:
		return recipe.ReconcileResult{}, nil
	}
	if err != nil {
		return recipe.ReconcileResult{}, err
	}
	d.mu.Lock()
	d.actions = append(d.actions, action)
	d.mu.Unlock()
	return recipe.ReconcileResult{}, nil
}

func (d *deployer) take() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.actions
	d.actions = nil
	sort.Strings(out)
	return out
}

func TestReconcilerScript(t *testing.T) {
	c := openStore(t)
	ctx := testCtx(t)
	for k, v := range map[string]string{"d/web-1": "v2", "d/web-2": "v2", "d/web-3": "v2", "a/alt-1": "v1", "a/web-1": "v1", "a/web-2": "v2"} {
		mustPut(t, c, k, v)
	}
	d := &deployer{}
	r, err := recipe.NewReconciler(c, newSession(t, c), recipe.ReconcilerConfig{
		Election: "ctl/deployer", DesiredPrefix: "d/", ActualPrefix: "a/", Reconcile: d.reconcile,
	})
	if err != nil {
		t.Fatal(err)
	}
	d.r = r
	runReconciler(t, r)
	if err := r.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	sameLines(t, "first pass", d.take(), []string{"start web-3 v2", "stop alt-1", "update web-1 to v2"})
	if err := r.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	sameLines(t, "second pass", d.take(), nil)
	mustDelete(t, c, "a/web-2") // web-2 crashed
	if err := r.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	sameLines(t, "after the crash", d.take(), []string{"start web-2 v2"})
	sameLines(t, "actual state", actualState(t, ctx, c), []string{"a/web-1=v2", "a/web-2=v2", "a/web-3=v2"})
}

// A key queued again while it is being reconciled is not handed to a
// second worker; the queued copies collapse into one more reconcile.
func TestReconcilerNoConcurrentKeyAndDedup(t *testing.T) {
	c := openStore(t)
	ctx := testCtx(t)
	var mu sync.Mutex
	inflight, maxInflight, calls := 0, 0, 0
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	reconcile := func(ctx context.Context, key string) (recipe.ReconcileResult, error) {
		mu.Lock()
		inflight++
		calls++
		maxInflight = max(maxInflight, inflight)
		first := calls == 1
		mu.Unlock()
		if first {
			started <- struct{}{}
			<-release
		}
		mu.Lock()
		inflight--
		mu.Unlock()
		return recipe.ReconcileResult{}, nil
	}
	r, err := recipe.NewReconciler(c, newSession(t, c), recipe.ReconcilerConfig{
		Election: "ctl/dedup", DesiredPrefix: "dd/", Reconcile: reconcile, Workers: 8,
	})
	if err != nil {
		t.Fatal(err)
	}
	runReconciler(t, r)
	if err := r.Sync(ctx); err != nil { // leading
		t.Fatal(err)
	}
	r.Enqueue("k")
	<-started
	for range 20 {
		r.Enqueue("k")
	}
	close(release)
	if err := r.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if maxInflight != 1 || calls != 2 {
		t.Fatalf("max in flight %d, calls %d; want 1 and 2", maxInflight, calls)
	}
}

func TestReconcilerBackoffAndRequeueAfter(t *testing.T) {
	c := openStore(t)
	ctx := testCtx(t)
	type requeue struct {
		after time.Duration
		err   bool
	}
	requeues := make(chan requeue, 16)
	var mu sync.Mutex
	calls := 0
	reconcile := func(ctx context.Context, key string) (recipe.ReconcileResult, error) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		switch {
		case n <= 3:
			return recipe.ReconcileResult{}, errors.New("boom")
		case n == 4:
			return recipe.ReconcileResult{RequeueAfter: 7 * time.Millisecond}, nil
		case n == 5:
			return recipe.ReconcileResult{}, errors.New("boom again")
		}
		return recipe.ReconcileResult{}, nil
	}
	r, err := recipe.NewReconciler(c, newSession(t, c), recipe.ReconcilerConfig{
		Election: "ctl/backoff", DesiredPrefix: "bd/", Reconcile: reconcile,
		BaseBackoff: time.Millisecond, MaxBackoff: 3 * time.Millisecond,
		OnRequeue: func(key string, after time.Duration, err error) { requeues <- requeue{after, err != nil} },
	})
	if err != nil {
		t.Fatal(err)
	}
	runReconciler(t, r)
	if err := r.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	r.Enqueue("k")
	// 1ms, 2ms, then capped at 3ms; a success with RequeueAfter; the next
	// error starts the backoff afresh.
	want := []requeue{{time.Millisecond, true}, {2 * time.Millisecond, true}, {3 * time.Millisecond, true},
		{7 * time.Millisecond, false}, {time.Millisecond, true}}
	for i, w := range want {
		select {
		case got := <-requeues:
			if got != w {
				t.Fatalf("requeue %d: got %+v, want %+v", i, got, w)
			}
		case <-ctx.Done():
			t.Fatalf("requeue %d never came", i)
		}
	}
	// The sixth call succeeds and nothing is requeued after it.
	for {
		mu.Lock()
		n := calls
		mu.Unlock()
		if n >= 6 {
			break
		}
		if err := r.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-requeues:
		t.Fatalf("requeued after success: %+v", got)
	default:
	}
}

// A leader that lost its session (so its leadership) has its writes
// refused, even with the context Reconcile gave it.
func TestReconcilerDeposedWriteRefused(t *testing.T) {
	c := openStore(t)
	ctx := testCtx(t)
	mustPut(t, c, "fd/x", "v1")
	captured := make(chan context.Context, 1)
	var r *recipe.Reconciler
	reconcile := func(ctx context.Context, key string) (recipe.ReconcileResult, error) {
		if _, ok := r.Actual(key); !ok {
			if _, err := r.Put(ctx, "fa/"+key, []byte("v1")); err != nil {
				return recipe.ReconcileResult{}, err
			}
		}
		select {
		case captured <- context.WithoutCancel(ctx):
		default:
		}
		return recipe.ReconcileResult{}, nil
	}
	s1 := newSession(t, c)
	var err error
	r, err = recipe.NewReconciler(c, s1, recipe.ReconcilerConfig{
		Election: "ctl/fence", DesiredPrefix: "fd/", ActualPrefix: "fa/", Reconcile: reconcile,
	})
	if err != nil {
		t.Fatal(err)
	}
	runReconciler(t, r)
	if err := r.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	old := <-captured
	if err := s1.Close(); err != nil { // the leader's session is lost
		t.Fatal(err)
	}
	// A new leader takes over.
	l2, err := concurrency.NewElection(newSession(t, c), "ctl/fence").Campaign(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Put(old, "fa/x", []byte("stale")); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("deposed leader's fenced Put: %v, want ErrLocked", err)
	}
	if _, err := r.Delete(old, "fa/x"); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("deposed leader's fenced Delete: %v, want ErrLocked", err)
	}
	if _, err := r.Put(ctx, "fa/x", []byte("stale")); !errors.Is(err, recipe.ErrNotFenced) {
		t.Fatalf("Put outside a reconcile: %v, want ErrNotFenced", err)
	}
	kv, err := c.Get(ctx, "fa/x")
	if err != nil || string(kv.Value) != "v1" {
		t.Fatalf("fa/x = %v, %v; want v1", kv, err)
	}
	_ = l2
}

// The leader loses its session in the middle of a pass (its reconcile of
// web-3 is stalled, as a paused process would be, and does not notice);
// its late write is refused, and the new leader completes the pass
// without repeating the action the old leader had done.
func TestReconcilerLeaderLostMidRun(t *testing.T) {
	c := openStore(t)
	ctx := testCtx(t)
	for k, v := range map[string]string{"d/web-1": "v2", "d/web-2": "v2", "d/web-3": "v2", "a/alt-1": "v1", "a/web-1": "v1", "a/web-2": "v2"} {
		mustPut(t, c, k, v)
	}
	stalled, release := make(chan struct{}), make(chan struct{})
	lateErr := make(chan error, 1)
	d1 := &deployer{}
	first := func(ctx context.Context, key string) (recipe.ReconcileResult, error) {
		if key == "web-3" {
			close(stalled)
			<-release
			// It has not noticed it was deposed: it writes anyway.
			_, err := d1.r.Put(context.WithoutCancel(ctx), "a/web-3", []byte("v2"))
			lateErr <- err
			return recipe.ReconcileResult{}, err
		}
		return d1.reconcile(ctx, key)
	}
	s1 := newSession(t, c)
	r1, err := recipe.NewReconciler(c, s1, recipe.ReconcilerConfig{
		Election: "ctl/deployer", DesiredPrefix: "d/", ActualPrefix: "a/", Reconcile: first, Workers: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	d1.r = r1
	runReconciler(t, r1)
	<-stalled
	if err := s1.Close(); err != nil { // the leader is gone
		t.Fatal(err)
	}
	close(release)
	if err := <-lateErr; !errors.Is(err, client.ErrLocked) {
		t.Fatalf("the deposed leader's late write: %v, want ErrLocked", err)
	}
	d2 := &deployer{}
	r2, err := recipe.NewReconciler(c, newSession(t, c), recipe.ReconcilerConfig{
		Election: "ctl/deployer", DesiredPrefix: "d/", ActualPrefix: "a/", Reconcile: d2.reconcile,
	})
	if err != nil {
		t.Fatal(err)
	}
	d2.r = r2
	runReconciler(t, r2)
	if err := r2.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	done1, done2 := d1.take(), d2.take()
	all := append(append([]string{}, done1...), done2...)
	sort.Strings(all)
	sameLines(t, "actions of both leaders", all, []string{"start web-3 v2", "stop alt-1", "update web-1 to v2"})
	for _, a := range done2 {
		for _, b := range done1 {
			if a == b {
				t.Fatalf("the new leader repeated %q", a)
			}
		}
	}
	if len(done1) == 0 {
		t.Fatalf("the first leader did nothing before it was deposed; the test proves nothing")
	}
}

// actualState lists the keys under a/ as key=value lines.
func actualState(t *testing.T, ctx context.Context, c client.KV) []string {
	t.Helper()
	rr, err := c.List(ctx, "a/")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, kv := range rr.KVs {
		got = append(got, fmt.Sprintf("%s=%s", kv.Key, kv.Value))
	}
	return got
}
