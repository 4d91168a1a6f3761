package main

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/examples/internal/exenv"
)

// reconcile gives the reconcilers a desired state, kills a child (a
// service the leader started) with kill -9, then kills the leading
// reconciler with kill -9 in the middle of a round, and shows from the
// actions recorded in the store that every divergence was repaired by
// one action, none repeated, the round finished by the next leader.
func reconcile(d *driver) error {
	const wait = time.Minute
	p := "examples/reconcile/" + d.run + "/"
	seen := 0 // actions already shown
	round := func(name string, want ...string) error {
		as, err := reconcileActions(d, p)
		if err != nil {
			return err
		}
		got := as[seen:]
		seen = len(as)
		var whats, lines []string
		for _, a := range got {
			whats = append(whats, a[1])
			lines = append(lines, a[0]+": "+a[1])
		}
		d.say("%s: the actions recorded under %sactions/: %s", name, p, strings.Join(lines, "; "))
		slices.Sort(whats)
		slices.Sort(want)
		if !slices.Equal(whats, want) {
			return fmt.Errorf("%s: actions %v, want exactly %v, each once", name, whats, want)
		}
		return nil
	}

	from := d.g.Len()
	if err := reconcileDesired(d, p, nil, map[string]string{"web-1": "v1", "web-2": "v1", "web-3": "v1"}); err != nil {
		return err
	}
	kids, err := reconcileRunning(d, from, "v1", "web-1", "web-2", "web-3")
	if err != nil {
		return err
	}
	if err := round("setup", "start web-1 v1", "start web-2 v1", "start web-3 v1"); err != nil {
		return err
	}

	from = d.g.Len()
	d.say("kill -9 web-1's child %d (a service that crashed: its registration expires with its lease, and the leader sees the divergence)", kids["web-1"].PID)
	if err := syscall.Kill(kids["web-1"].PID, syscall.SIGKILL); err != nil {
		return err
	}
	if _, err := reconcileRunning(d, from, "v1", "web-1"); err != nil {
		return err
	}
	if err := round("a child killed", "start web-1 v1"); err != nil {
		return err
	}

	from = d.g.Len()
	if err := reconcileDesired(d, p, nil, map[string]string{"web-1": "v2", "web-2": "v2", "web-3": "v2"}); err != nil {
		return err
	}
	_, first, err := d.wait(wait, "the round's first action", from, is("action", ""))
	if err != nil {
		return err
	}
	d.kill9(d.instance(first), "it leads, in the middle of the round: its session expires after the TTL, and another leads")
	_, next, err := d.wait(wait, "a new leader", from, func(e exenv.Event) bool { return e.What == "leader" && e.Instance != first.Instance })
	if err != nil {
		return err
	}
	d.say("%s leads (term %s); it finishes the round from the state as it is", next.Instance, next.Get("term"))
	if _, err := reconcileRunning(d, from, "v2", "web-1", "web-2", "web-3"); err != nil {
		return err
	}
	if err := round("the leader killed mid-round", "update web-1 v2", "update web-2 v2", "update web-3 v2"); err != nil {
		return err
	}

	from = d.g.Len()
	if err := reconcileDesired(d, p, []string{"web-1", "web-2", "web-3"}, nil); err != nil {
		return err
	}
	for _, name := range []string{"web-1", "web-2", "web-3"} {
		if _, _, err := d.wait(wait, name+" to stop", from, is("exiting", name)); err != nil {
			return err
		}
	}
	if err := round("nothing desired", "stop web-1", "stop web-2", "stop web-3"); err != nil {
		return err
	}
	d.say("every divergence repaired by one action, none repeated, across the kill of a child and of the leader")
	return nil
}

// reconcileDesired deletes del and puts put under the desired state, in
// one transaction.
func reconcileDesired(d *driver, p string, del []string, put map[string]string) error {
	var ops []client.Op
	var said []string
	for _, k := range del {
		ops = append(ops, client.OpDelete(p+"desired/"+k))
		said = append(said, "delete "+k)
	}
	for _, k := range slices.Sorted(maps.Keys(put)) {
		ops = append(ops, client.OpPut(p+"desired/"+k, []byte(put[k])))
		said = append(said, k+" "+put[k])
	}
	d.say("desired state under %sdesired/: %s", p, strings.Join(said, ", "))
	_, err := d.client.Txn(d.ctx).Then(ops...).Commit()
	return err
}

// reconcileRunning waits for each child of names to say it runs version,
// at position from or later, and returns those events.
func reconcileRunning(d *driver, from int, version string, names ...string) (map[string]exenv.Event, error) {
	got := map[string]exenv.Event{}
	for _, name := range names {
		_, e, err := d.wait(time.Minute, name+" "+version+" running", from, func(e exenv.Event) bool {
			return e.What == "running" && e.Instance == name && e.Get("version") == version
		})
		if err != nil {
			return nil, err
		}
		got[name] = e
	}
	return got, nil
}

// reconcileActions are the actions recorded in the store, in the order
// they were taken: {instance, action}.
func reconcileActions(d *driver, p string) ([][2]string, error) {
	r, err := d.client.List(d.ctx, p+"actions/")
	if err != nil {
		return nil, err
	}
	kvs := slices.Clone(r.KVs)
	sort.Slice(kvs, func(i, j int) bool { return kvs[i].ModRevision < kvs[j].ModRevision })
	var out [][2]string
	for _, kv := range kvs {
		by, what, _ := strings.Cut(string(kv.Value), " ")
		out = append(out, [2]string{by, what})
	}
	return out, nil
}
