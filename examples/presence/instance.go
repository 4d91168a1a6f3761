package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dkv-io/dkv/client/concurrency"
	"github.com/dkv-io/dkv/client/recipe"
	"github.com/dkv-io/dkv/examples/internal/exenv"
)

// instance is one node as a process of its own (--instance): it
// registers in the group on its own session, follows the group with its
// own watch (an event line per join, update and leave it sees), and on
// SIGTERM deregisters and closes its session. Killed (SIGKILL) or
// frozen (SIGSTOP), it says nothing: its session's lease expires after
// the TTL and every watcher sees it leave.
func instance(ctx context.Context, in *exenv.Instance, ttl time.Duration) error {
	group := "examples-presence-" + in.Run
	mw, err := recipe.WatchMembers(ctx, in.Client, group)
	if err != nil {
		return err
	}
	defer mw.Close()
	in.Emit("watching", "group", group, "members", ids(mw.Initial()))
	// The members already there are reported as joins too (initial),
	// so that a reader sees every member join once whenever it started.
	for _, m := range mw.Initial() {
		in.Emit("join", "member", m.ID, "members", ids(mw.Initial()), "initial", true)
	}
	s, err := concurrency.NewSession(ctx, in.Client, concurrency.WithTTL(ttl))
	if err != nil {
		return err
	}
	defer s.Close() // revokes the lease: what is left of the registration goes with it
	reg, err := recipe.Register(ctx, s, group, in.Name, []byte(fmt.Sprintf("pid %d", in.Events.PID())))
	if err != nil {
		return err
	}
	in.Emit("registered", "ttl", ttl, "lease", fmt.Sprintf("%x", s.Lease()))
	for {
		select {
		case ev, ok := <-mw.Events():
			if !ok {
				return errors.New("the group's watch ended")
			}
			in.Emit(ev.Type.String(), "member", ev.Member.ID, "members", ids(mw.Members()))
		case <-s.Done():
			// Lost, not given up: the lease expired (a freeze longer than
			// the TTL, a partition). A real service would register again.
			return fmt.Errorf("the session ended: %v", s.Err())
		case <-ctx.Done():
			cctx, cancel := exenv.CleanupContext()
			defer cancel()
			if err := reg.Deregister(cctx); err != nil {
				return err
			}
			in.Emit("deregistered")
			return nil
		}
	}
}

func ids(ms []recipe.Member) string {
	var s []string
	for _, m := range ms {
		s = append(s, m.ID)
	}
	return strings.Join(s, ",")
}
