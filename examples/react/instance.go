package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/examples/internal/exenv"
)

// The keys of the process mode, under examples/react/RUN/:
//
//	data/...             the changes the consumers react to (written by
//	                     you, or the test)
//	consumers/NAME       the last revision the consumer NAME handled: its
//	                     checkpoint, in the store, not in the process
//	handled/NAME/REV-I  what NAME did for the change I at REV (the
//	                     reaction's effect), written in one transaction
//	                     with the checkpoint
//
// A consumer killed at any point resumes from its checkpoint + 1: the
// effect and the checkpoint commit together or not at all, so a change
// is neither handled twice nor skipped.

// consumer is one reacting process (--instance NAME).
type consumer struct {
	in     *exenv.Instance
	prefix string // examples/react/RUN/
	ckKey  string
	ckRev  int64 // the checkpoint key's mod revision: the write it was last moved by (0: none)
	last   int64 // the last revision handled
	n      int   // changes handled by this process
}

// runConsumer reacts to every change under data/ until ctx ends
// (SIGTERM), by a watch resumed from the checkpoint kept in the store.
func runConsumer(ctx context.Context, in *exenv.Instance) error {
	c := &consumer{in: in, prefix: "examples/react/" + in.Run + "/"}
	c.ckKey = c.prefix + "consumers/" + in.Name
	kv, err := in.Client.Get(ctx, c.ckKey)
	switch {
	case errors.Is(err, client.ErrNotFound):
		if err := c.sync(ctx, "first start: no checkpoint"); err != nil {
			return err
		}
	case err != nil:
		return err
	default:
		if c.last, err = strconv.ParseInt(string(kv.Value), 10, 64); err != nil {
			return fmt.Errorf("checkpoint %s = %q: %w", c.ckKey, kv.Value, err)
		}
		c.ckRev = kv.ModRevision
		in.Emit("resuming", "from", c.last+1, "checkpoint", c.ckKey)
	}
	for {
		err := c.follow(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if !errors.Is(err, client.ErrCompacted) {
			return err
		}
		// The changes after the checkpoint are gone from the history:
		// they cannot be handled one by one. Say so, and start again
		// from the state as it is now.
		in.Emit("compacted", "from", c.last+1, "err", err)
		if err := c.sync(ctx, fmt.Sprintf("the changes after %d were compacted", c.last)); err != nil {
			return err
		}
	}
}

// sync reads the state of data/ at one revision R, records it as
// handled (a resync: one effect for the whole state) with the checkpoint
// R, and the watch goes on from R+1.
func (c *consumer) sync(ctx context.Context, why string) error {
	r, err := c.in.Client.List(ctx, c.prefix+"data/")
	if err != nil {
		return err
	}
	effect := fmt.Sprintf("resync: %d keys at revision %d (%s)", len(r.KVs), r.Revision, why)
	if err := c.commit(ctx, r.Revision, [2]string{fmt.Sprintf("sync-%d", r.Revision), effect}); err != nil {
		return err
	}
	c.in.Emit("synced", "rev", r.Revision, "keys", len(r.KVs), "why", why)
	return nil
}

// follow watches data/ from the checkpoint + 1 and handles each change.
func (c *consumer) follow(ctx context.Context) error {
	w, err := c.in.Client.WatchPrefix(ctx, c.prefix+"data/", client.WithStartRevision(c.last+1))
	if err != nil {
		return err
	}
	defer w.Stop()
	for b := range w.Events() {
		// A batch is one revision: a transaction's changes come
		// together, and are handled together, with one checkpoint.
		var effects [][2]string
		for i, e := range b.Events {
			what := "put " + e.KV.Key + " = " + string(e.KV.Value)
			if e.Type == client.EventDelete {
				what = "delete " + e.KV.Key
			}
			effects = append(effects, [2]string{fmt.Sprintf("%d-%d", b.Revision, i), what})
		}
		if len(effects) == 0 {
			continue
		}
		if err := c.commit(ctx, b.Revision, effects...); err != nil {
			return err
		}
		for _, e := range effects {
			c.n++
			c.in.Emit("handled", "rev", b.Revision, "change", e[1], "n", c.n)
		}
	}
	return w.Err()
}

// commit writes the reaction's effects under handled/NAME/ID and moves
// the checkpoint to rev, in one transaction that holds only if the
// checkpoint is as this process last left it: a second process with the
// same name cannot interleave with it.
func (c *consumer) commit(ctx context.Context, rev int64, effects ...[2]string) error {
	ops := []client.Op{client.OpPut(c.ckKey, []byte(strconv.FormatInt(rev, 10)))}
	for _, e := range effects {
		ops = append(ops, client.OpPut(c.prefix+"handled/"+c.in.Name+"/"+e[0], []byte(e[1])))
	}
	res, err := c.in.Client.Txn(ctx).If(client.ModRevision(c.ckKey).Equal(c.ckRev)).Then(ops...).Commit()
	if err != nil {
		return err
	}
	if !res.Succeeded {
		return fmt.Errorf("the checkpoint %s moved under this process: another consumer named %s is running", c.ckKey, c.in.Name)
	}
	c.ckRev, c.last = res.Revision, rev
	return nil
}
