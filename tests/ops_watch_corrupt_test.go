package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/testutil"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
)

// Watches open on a member when it gets a CORRUPT alarm end with
// Unavailable naming the alarm (docs/operations.md, "Alarms"): the member
// sends no more events from its diverged state, and a client's watch
// resumes on a healthy member, missing nothing.
func TestWatchesEndOnCorruptAlarmAndResumeElsewhere(t *testing.T) {
	// Long enough that a watch can be opened between a disarm and the
	// check that raises the alarm again.
	const interval = 2 * time.Second
	c := servertest.NewCluster(t, 3, server.Config{CorruptCheckInterval: interval})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	leader := c.WaitLeader()
	for _, kv := range [][2]string{{"a", "alpha"}, {"b", "beta"}} {
		if _, err := leader.KV.Put(ctx, &dkvpb.PutRequest{Key: []byte(kv[0]), Value: []byte(kv[1])}); err != nil {
			t.Fatal(err)
		}
	}
	c.WaitConverged()
	victim := c.Followers()[0]
	corruptBehindRaft(t, c, victim)
	mc := func() dkvpb.MaintenanceClient { return dkvpb.NewMaintenanceClient(mustConn(t, c.Leader())) }
	raised := func() bool {
		r, err := mc().Alarm(ctx, &dkvpb.AlarmActionRequest{})
		return err == nil && len(r.GetAlarms()) == 1 && r.GetAlarms()[0].GetMemberId() == victim.ID()
	}
	testutil.Eventually(t, 15*time.Second, "the CORRUPT alarm for "+victim.Name, raised)

	// Disarm, and open watches on the victim before the next check
	// raises the alarm again: a raw stream on the victim, and a client
	// watch whose first endpoint is the victim.
	var raw dkvpb.Watch_WatchClient
	testutil.Eventually(t, 30*time.Second, "a watch created on "+victim.Name+" after a disarm", func() bool {
		if _, err := mc().Alarm(ctx, &dkvpb.AlarmActionRequest{Action: dkvpb.AlarmActionRequest_DISARM, Alarm: dkvpb.AlarmType_ALARM_TYPE_CORRUPT}); err != nil {
			return false
		}
		st, err := dkvpb.NewWatchClient(mustConn(t, victim)).Watch(ctx)
		if err != nil {
			return false
		}
		if err := st.Send(&dkvpb.WatchRequest{RequestUnion: &dkvpb.WatchRequest_CreateRequest{CreateRequest: &dkvpb.WatchCreateRequest{Key: []byte("w/"), RangeEnd: []byte("w0")}}}); err != nil {
			return false
		}
		r, err := st.Recv()
		if err != nil || !r.GetCreated() || r.GetCanceled() {
			return false
		}
		raw = st
		return true
	})
	eps := []string{victim.Srv.ClientAddr()}
	for _, nd := range c.Nodes {
		if nd != victim {
			eps = append(eps, nd.Srv.ClientAddr())
		}
	}
	cl, err := client.New(ctx, client.Config{Endpoints: eps})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	w, err := cl.WatchKey(ctx, "w/", client.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}

	// The check raises the alarm again; the raw stream ends with it.
	testutil.Eventually(t, 15*time.Second, "the CORRUPT alarm raised again", raised)
	ended := make(chan error, 1)
	go func() {
		for {
			if _, err := raw.Recv(); err != nil {
				ended <- err
				return
			}
		}
	}()
	select {
	case err := <-ended:
		err = dkverr.FromGRPC(err)
		if dkverr.CodeOf(err) != dkverr.Unavailable || !strings.Contains(err.Error(), "CORRUPT") {
			t.Errorf("the watch stream on the diverged member ended with %v; want Unavailable naming the CORRUPT alarm", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the watch stream on %s is still open 10s after its CORRUPT alarm", victim.Name)
	}

	// Writes after the alarm reach the client's watch, from a healthy member.
	want := []string{"w/1", "w/2", "w/3"}
	for _, k := range want {
		if _, err := cl.Put(ctx, k, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	timeout := time.After(20 * time.Second)
	for len(got) < len(want) {
		select {
		case b, ok := <-w.Events():
			if !ok {
				t.Fatalf("the client's watch ended: %v; want it resumed on a healthy member", w.Err())
			}
			for _, ev := range b.Events {
				got = append(got, string(ev.KV.Key))
			}
		case <-timeout:
			t.Fatalf("the client's watch got %v of %v within 20s of the CORRUPT alarm", got, want)
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("the client's watch got %v, want %v (each once, in order)", got, want)
	}
}
