package recipe_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/concurrency"
	"github.com/dkv-io/dkv/client/recipe"
	"github.com/dkv-io/dkv/internal/testutil"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
)

// TestReconcilerScriptLeaderKilled is the deployer's reconciler script on a
// 3-node cluster with the leader killed mid-run. The first controller
// runs beside the raft leader and talks to it first; in the middle of
// its first pass (its reconcile of web-3 stalls, the rest is done) that node is killed
// and the controller with it (its session's keep-alives stop). The
// second controller, on the surviving members, takes over once that
// session's lease expires, completes the pass without repeating an
// action the first made, and plays the rest of the script: a pass that
// does nothing, then exactly one action after web-2 crashes. The first
// controller's late write is refused by its fence.
func TestReconcilerScriptLeaderKilled(t *testing.T) {
	c3 := servertest.NewCluster(t, 3, server.Config{})
	l := c3.WaitLeader()
	fs := c3.Followers()
	cl1 := servertest.Client(t, l, fs[0], fs[1])
	cl2 := servertest.Client(t, fs[0], fs[1])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for k, v := range map[string]string{"d/web-1": "v2", "d/web-2": "v2", "d/web-3": "v2", "a/alt-1": "v1", "a/web-1": "v1", "a/web-2": "v2"} {
		if _, err := cl2.Put(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	cfg := func(f recipe.ReconcileFunc) recipe.ReconcilerConfig {
		return recipe.ReconcilerConfig{Election: "ctl/deployer", DesiredPrefix: "d/", ActualPrefix: "a/", Reconcile: f, Workers: 2}
	}

	stalled, release := make(chan struct{}), make(chan struct{})
	lateErr := make(chan error, 1)
	d1 := &deployer{}
	first := func(ctx context.Context, key string) (recipe.ReconcileResult, error) {
		if key == "web-3" {
			select {
			case <-stalled:
			default:
				close(stalled)
			}
			<-release
			// It has not noticed that it was deposed: it writes anyway.
			_, err := d1.r.Put(context.WithoutCancel(ctx), "a/web-3", []byte("v2"))
			select {
			case lateErr <- err:
			default:
			}
			return recipe.ReconcileResult{}, err
		}
		return d1.reconcile(ctx, key)
	}
	s1, err := concurrency.NewSession(ctx, cl1, concurrency.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	r1, err := recipe.NewReconciler(cl1, s1, cfg(first))
	if err != nil {
		t.Fatal(err)
	}
	d1.r = r1
	runReconciler(t, r1)
	var once sync.Once
	unstall := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unstall) // before runRec's: a failed test must not leave r1 stalled
	select {
	case <-stalled:
	case <-ctx.Done():
		t.Fatal("the first controller never reached web-3")
	}
	// The other worker does the rest of the pass meanwhile.
	testutil.Eventually(t, 30*time.Second, "the first controller's other actions", func() bool {
		d1.mu.Lock()
		defer d1.mu.Unlock()
		return len(d1.actions) >= 2
	})
	done1 := d1.take()
	sameLines(t, "first controller before the kill", done1, []string{"stop alt-1", "update web-1 to v2"})

	// The second controller campaigns on the survivors; then the raft
	// leader's node dies, and the first controller with it.
	d2 := &deployer{}
	s2, err := concurrency.NewSession(ctx, cl2, concurrency.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	r2, err := recipe.NewReconciler(cl2, s2, cfg(d2.reconcile))
	if err != nil {
		t.Fatal(err)
	}
	d2.r = r2
	runReconciler(t, r2)
	s1.Orphan()
	c3.Stop(l)
	t.Logf("killed %s (raft leader, and the first controller's node)", l.Name)

	sctx, scancel := context.WithTimeout(ctx, 45*time.Second)
	err = r2.Sync(sctx)
	scancel()
	if err != nil {
		// Say what the election looked like, to tell a stuck election
		// from a stuck pass.
		dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer dcancel()
		rr, lerr := cl2.List(dctx, "ctl/deployer")
		var keys []string
		if rr != nil {
			for _, kv := range rr.KVs {
				keys = append(keys, fmt.Sprintf("%s lease %x", kv.Key, kv.Lease))
			}
		}
		ttl, terr := cl2.TimeToLive(dctx, s1.Lease())
		li, derr := cl2.DescribeLock(dctx, "ctl/deployer")
		t.Fatalf("second controller's Sync: %v; election keys %v (%v); first session's lease %x: %+v (%v); second's %x; lock %+v (%v)",
			err, keys, lerr, s1.Lease(), ttl, terr, s2.Lease(), li, derr)
	}
	done2 := d2.take()
	sameLines(t, "second controller's first pass", done2, []string{"start web-3 v2"})

	// The deposed controller wakes and writes: refused by its fence.
	unstall()
	select {
	case err := <-lateErr:
		if !errors.Is(err, client.ErrLocked) {
			t.Fatalf("the deposed controller's late write: %v, want ErrLocked", err)
		}
	case <-ctx.Done():
		t.Fatal("the deposed controller's late write never returned")
	}
	if got := d1.take(); len(got) != 0 {
		t.Fatalf("the deposed controller acted after the kill: %v", got)
	}

	if err := r2.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	sameLines(t, "the next pass", d2.take(), nil)
	if _, err := cl2.Delete(ctx, "a/web-2"); err != nil { // web-2 crashed
		t.Fatal(err)
	}
	if err := r2.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	sameLines(t, "after web-2 crashed", d2.take(), []string{"start web-2 v2"})
	sameLines(t, "actual state", actualState(t, ctx, cl2), []string{"a/web-1=v2", "a/web-2=v2", "a/web-3=v2"})
}
