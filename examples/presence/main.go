// Command presence shows a presence group: nodes join and leave, a
// dashboard prints a line per change, and a node that is killed (its
// process stops keeping its session lease alive) disappears on its own
// within its TTL, with no one deregistering it.
//
// Each node registers with recipe.Register on its own session
// (concurrency.Session, a kept-alive lease); the dashboard and every node
// follow the group with recipe.WatchMembers. The script:
//
//	node-1, node-2 and node-3 join; node-2 leaves cleanly; node-3 is
//	killed; node-4 joins; everyone leaves.
//
// With --instance NAME the process is one node, until SIGTERM (see
// instance.go): kill -9 one of three to see it leave within its TTL (go
// run ./examples/run presence does it for you).
//
//	go run ./examples/presence
//	go run ./examples/presence --endpoints 127.0.0.1:17861,127.0.0.1:17871,127.0.0.1:17881
//	go run ./examples/presence --endpoints ... --instance node-1
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/concurrency"
	"github.com/dkv-io/dkv/client/recipe"
	"github.com/dkv-io/dkv/examples/internal/exenv"
)

func main() {
	var o options
	flag.DurationVar(&o.ttl, "ttl", 3*time.Second, "each node's session TTL: how long a killed node stays listed at most (plus the store's expiry check)")
	exenv.MainInstances(func(ctx context.Context, env *exenv.Env) error {
		ctx, cancel := context.WithTimeout(ctx, 4*o.ttl+time.Minute)
		defer cancel()
		o.group, o.out = "examples-presence-"+env.Run, os.Stdout
		// The CLI can watch the group only where it can reach the store:
		// an embedded store has no port, and is gone after the run.
		o.cliWatch = env.Command("presence", "watch", o.group)
		_, err := run(ctx, env.Client, o)
		return err
	}, func(ctx context.Context, in *exenv.Instance) error {
		return instance(ctx, in, o.ttl)
	})
}

type options struct {
	ttl      time.Duration
	group    string
	out      io.Writer
	cliWatch string // the dkv command that watches the group during the run; "" if none can
}

// result is what the run saw.
type result struct {
	// dashboard is the dashboard's changes, "join node-1" etc., in order;
	// seen is the same as each node's own watch saw it, by node.
	dashboard []string
	seen      map[string][]string
	// killedGone is how long after node-3 was killed its leave arrived.
	killedGone time.Duration
}

// node is one member of the group.
type node struct {
	id       string
	s        *concurrency.Session
	reg      *recipe.Registration
	mw       *recipe.MemberWatch
	joinedAt int // the dashboard's change count before this node joined

	mu     sync.Mutex
	seen   []string
	notify chan struct{}
}

// follow records what the node's own watch delivers.
func (n *node) follow() {
	for ev := range n.mw.Events() {
		n.mu.Lock()
		n.seen = append(n.seen, ev.Type.String()+" "+ev.Member.ID)
		n.mu.Unlock()
		select {
		case n.notify <- struct{}{}:
		default:
		}
	}
}

// caughtUp waits until the node's watch has delivered want changes.
func (n *node) caughtUp(ctx context.Context, want int) []string {
	for {
		n.mu.Lock()
		seen := slices.Clone(n.seen)
		n.mu.Unlock()
		if len(seen) >= want {
			return seen
		}
		select {
		case <-n.notify:
		case <-ctx.Done():
			return seen
		}
	}
}

func run(ctx context.Context, c *client.Client, o options) (*result, error) {
	log := exenv.NewLog(o.out)
	res := &result{seen: map[string][]string{}}
	dash, err := recipe.WatchMembers(ctx, c, o.group)
	if err != nil {
		return nil, err
	}
	defer dash.Close()
	log.Say("dashboard: watching group %s (%d members), nodes' session TTL %v", o.group, len(dash.Initial()), o.ttl)
	if o.cliWatch != "" {
		log.Say("(while it runs, %s shows the same changes from the CLI)", o.cliWatch)
	}

	// next waits for the dashboard's next change and prints it.
	next := func() (recipe.MemberEvent, error) {
		select {
		case ev, ok := <-dash.Events():
			if !ok {
				return ev, fmt.Errorf("the dashboard's watch ended")
			}
			line := ev.Type.String() + " " + ev.Member.ID
			res.dashboard = append(res.dashboard, line)
			var ids []string
			for _, m := range dash.Members() {
				ids = append(ids, m.ID)
			}
			log.Printf("%-12s members: [%s]", line, strings.Join(ids, " "))
			return ev, nil
		case <-ctx.Done():
			return recipe.MemberEvent{}, fmt.Errorf("waiting for the dashboard: %w", ctx.Err())
		}
	}
	expect := func(t recipe.MemberEventType, id string) error {
		ev, err := next()
		if err != nil {
			return fmt.Errorf("expecting %s %s: %w", t, id, err)
		}
		if ev.Type != t || ev.Member.ID != id {
			err = fmt.Errorf("dashboard saw %s %s, expected %s %s", ev.Type, ev.Member.ID, t, id)
		}
		return err
	}

	nodes := map[string]*node{}
	join := func(id string) error {
		s, err := concurrency.NewSession(ctx, c, concurrency.WithTTL(o.ttl))
		if err != nil {
			return err
		}
		n := &node{id: id, s: s, joinedAt: len(res.dashboard), notify: make(chan struct{}, 1)}
		// Each node follows the group too, as a real member would.
		if n.mw, err = recipe.WatchMembers(ctx, c, o.group); err != nil {
			s.Close()
			return err
		}
		if n.reg, err = recipe.Register(ctx, s, o.group, id, []byte("up since "+time.Now().Format(time.TimeOnly))); err != nil {
			n.mw.Close()
			s.Close()
			return err
		}
		nodes[id] = n
		go n.follow()
		return expect(recipe.MemberJoin, id)
	}
	// stopWatching ends a node's own watch once it has seen every change
	// the dashboard saw since the node joined (or 10s passed), and keeps
	// what it saw.
	stopWatching := func(n *node) {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		res.seen[n.id] = n.caughtUp(wctx, len(res.dashboard)-n.joinedAt)
		cancel()
		n.mw.Close()
	}
	defer func() { // whatever happened, no session outlives the run
		for _, n := range nodes {
			n.mw.Close()
			n.s.Close()
		}
	}()

	for _, id := range []string{"node-1", "node-2", "node-3"} {
		if err := join(id); err != nil {
			return nil, err
		}
	}

	log.Say("node-2 leaves cleanly (Deregister)")
	stopWatching(nodes["node-2"])
	if err := nodes["node-2"].reg.Deregister(ctx); err != nil {
		return nil, err
	}
	if err := expect(recipe.MemberLeave, "node-2"); err != nil {
		return nil, err
	}

	log.Say("node-3 is killed: it stops renewing its lease and says nothing")
	stopWatching(nodes["node-3"])
	killed := time.Now()
	nodes["node-3"].s.Orphan() // what a crash does: no keep-alives, no revoke
	if err := expect(recipe.MemberLeave, "node-3"); err != nil {
		return nil, err
	}
	res.killedGone = time.Since(killed)
	log.Say("node-3 disappeared %.1fs after it was killed (TTL %v): nobody deregistered it, its lease expired", res.killedGone.Seconds(), o.ttl)

	if err := join("node-4"); err != nil {
		return nil, err
	}
	log.Say("everyone leaves (closing a session revokes its lease)")
	for _, id := range []string{"node-1", "node-4"} {
		stopWatching(nodes[id])
		if err := nodes[id].s.Close(); err != nil {
			return nil, err
		}
		if err := expect(recipe.MemberLeave, id); err != nil {
			return nil, err
		}
	}
	for _, id := range slices.Sorted(maps.Keys(res.seen)) {
		log.Say("  %s's own watch saw: %s", id, strings.Join(res.seen[id], ", "))
	}
	return res, nil
}
