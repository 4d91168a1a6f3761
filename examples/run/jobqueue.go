package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/dkv-io/dkv/client/recipe"
)

// jobqueue kills one consumer just after it claimed a job and another
// just after it charged one (before its ack), lets the last consumer
// finish, and shows every invoice charged once and the queue empty.
func jobqueue(d *driver) error {
	const wait = time.Minute
	i, _, err := d.wait(wait, "a job done", 0, is("done", ""))
	if err != nil {
		return err
	}
	_, claimed, err := d.wait(wait, "a job claimed", i+1, is("claimed", ""))
	if err != nil {
		return err
	}
	d.kill9(d.instance(claimed), fmt.Sprintf("it just claimed %s and has not charged it: the claim expires after the visibility timeout, and another consumer takes the job", claimed.Get("job")))
	_, charged, err := d.wait(wait, "a job charged", d.g.Len(), is("charged", ""))
	if err != nil {
		return err
	}
	d.kill9(d.instance(charged), fmt.Sprintf("it just charged %s and has not acked it: the job comes back, and its next attempt finds the charge", charged.Get("job")))

	q, err := recipe.NewQueue(d.client, "examples-jobqueue-"+d.run)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(d.ctx, 2*wait)
	defer cancel()
	for {
		st, err := q.Stats(ctx)
		if err != nil {
			return err
		}
		if st.Visible+st.Claimed+st.Scheduled == 0 {
			d.say("the queue is empty; dead-lettered: %d", st.Dead)
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the queue is not empty after %v: %+v", 2*wait, st)
		case <-time.After(200 * time.Millisecond):
		}
	}
	prefix := "examples/jobqueue/" + d.run + "/results/"
	r, err := d.client.List(ctx, prefix)
	if err != nil {
		return err
	}
	var twice []string
	for _, kv := range r.KVs {
		if kv.Version != 1 {
			twice = append(twice, strings.TrimPrefix(kv.Key, prefix))
		}
	}
	d.say("the store holds %d charges (%s), of 10 invoices; charged more than once: %d", len(r.KVs), prefix, len(twice))
	if len(r.KVs) != 10 || len(twice) > 0 {
		return fmt.Errorf("%d of 10 invoices charged; charged twice: %v", len(r.KVs), twice)
	}
	return nil
}
