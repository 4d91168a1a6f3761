package tests

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/keys"
	"github.com/dkv-io/dkv/internal/testutil"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
)

// steadyWrites runs writers sequential put loops against nd (64
// keys each, "load/<writer>/<n>") until the returned stop is called; stop
// returns how many puts were acknowledged, the errors, and each key's
// last acknowledged value (when the key's last put did not fail).
func steadyWrites(t *testing.T, nd *servertest.Node, writers int) (stop func() (int64, []error, map[string]string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var acked atomic.Int64
	var mu sync.Mutex
	var errs []error
	last := map[string]string{}
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				key, val := fmt.Sprintf("load/%d/%d", w, i%64), fmt.Sprintf("v%d", i)
				pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := nd.KV.Put(pctx, &dkvpb.PutRequest{Key: []byte(key), Value: []byte(val)})
				pcancel()
				mu.Lock()
				if err != nil {
					delete(last, key) // outcome unknown
					if ctx.Err() == nil {
						errs = append(errs, err)
					}
				} else {
					last[key] = val
					acked.Add(1)
				}
				mu.Unlock()
			}
		}(w)
	}
	return func() (int64, []error, map[string]string) {
		cancel()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return acked.Load(), errs, last
	}
}

// A lease record changed on one member's disk behind raft's back (its
// one bit flipped), while 16 clients keep writing: the KV hashes still agree,
// so only the lease and lock hash can find it, and it must compare the
// members at one applied index although their indexes move all the time.
func TestCorruptLeaseRecordFoundUnderSteadyWrites(t *testing.T) {
	const interval = 300 * time.Millisecond
	c := servertest.NewCluster(t, 3, server.Config{CorruptCheckInterval: interval})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	leader := c.WaitLeader()
	g, err := dkvpb.NewLeaseClient(mustConn(t, leader)).Grant(ctx, &dkvpb.LeaseGrantRequest{TtlMs: 3600_000})
	if err != nil {
		t.Fatal(err)
	}
	c.WaitConverged()
	stop := steadyWrites(t, leader, 16)
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()

	victim := c.Followers()[0]
	c.Stop(victim)
	db, err := pebble.Open(victim.Dir, &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: keys.LeaseRecordPrefix, UpperBound: append(append([]byte(nil), keys.LeaseRecordPrefix...), 0xff)})
	if err != nil {
		t.Fatal(err)
	}
	var key, rec []byte
	for it.First(); it.Valid(); it.Next() {
		key, rec = append([]byte(nil), it.Key()...), append([]byte(nil), it.Value()...)
	}
	it.Close()
	if key == nil {
		t.Fatalf("no lease record under %q on %s (lease %d)", keys.LeaseRecordPrefix, victim.Name, g.GetId())
	}
	rec[len(rec)-1] ^= 0x01 // one bit of the record, which the KV hash does not cover
	if err := db.Set(key, rec, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	c.Start(victim)
	changed := time.Now()

	var alarms []*dkvpb.AlarmMember
	testutil.Eventually(t, 20*time.Second, "a CORRUPT alarm for "+victim.Name+" while writes go on", func() bool {
		nd := c.Leader()
		if nd == nil {
			return false
		}
		st, err := nd.Cluster.Status(ctx, &dkvpb.StatusRequest{})
		if err != nil {
			return false
		}
		alarms = st.GetAlarms()
		return len(alarms) > 0
	})
	acked, errs, _ := stop()
	stopped = true
	t.Logf("CORRUPT alarm raised %v after the restart, %d puts acknowledged meanwhile: %v", time.Since(changed).Round(time.Millisecond), acked, alarms)
	if len(alarms) != 1 || alarms[0].GetMemberId() != victim.ID() || alarms[0].GetAlarm() != dkvpb.AlarmType_ALARM_TYPE_CORRUPT {
		t.Fatalf("alarms %v; want one CORRUPT alarm, for %s (%x)", alarms, victim.Name, victim.ID())
	}
	if acked == 0 {
		t.Errorf("no write acknowledged during the check: the writes were not steady")
	}
	if len(errs) > 0 {
		t.Logf("%d put errors during the check: first %v", len(errs), errs[0])
	}
}
