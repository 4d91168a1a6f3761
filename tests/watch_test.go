package tests

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/internal/testutil"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
)

var watchSeed = flag.Int64("watch.seed", 0, "seed for TestWatchProperty (0 = time-based)")

func startSingle(t *testing.T, httpAddr string) *server.Server {
	t.Helper()
	return servertest.Start(t, servertest.WithClientPort(), servertest.WithConfig(func(c *server.Config) {
		c.HTTPAddr, c.TickInterval = httpAddr, 20*time.Millisecond
	})).Srv
}

func rawConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestWatchStreamMultiplexing drives the wire protocol directly: two
// watches on one stream (a client-chosen and a server-assigned id), a
// duplicate id, a progress request and a cancel.
func TestWatchStreamMultiplexing(t *testing.T) {
	srv := startSingle(t, "")
	conn := rawConn(t, srv.ClientAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	kv := dkvpb.NewKVClient(conn)
	st, err := dkvpb.NewWatchClient(conn).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	create := func(r *dkvpb.WatchCreateRequest) {
		if err := st.Send(&dkvpb.WatchRequest{RequestUnion: &dkvpb.WatchRequest_CreateRequest{CreateRequest: r}}); err != nil {
			t.Fatal(err)
		}
	}
	recv := func() *dkvpb.WatchResponse {
		r, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	create(&dkvpb.WatchCreateRequest{Key: []byte("a"), WatchId: 7})
	if r := recv(); !r.Created || r.WatchId != 7 {
		t.Fatalf("first created: %v", r)
	}
	create(&dkvpb.WatchCreateRequest{Key: []byte("b/"), Prefix: true, PrevKv: true})
	r := recv()
	if !r.Created || r.WatchId == 7 || r.WatchId == 0 {
		t.Fatalf("second created: %v", r)
	}
	second := r.WatchId
	create(&dkvpb.WatchCreateRequest{Key: []byte("c"), WatchId: 7})
	if r := recv(); !r.Canceled || r.CancelStatus != "INVALID_INPUT" {
		t.Fatalf("duplicate id: %v", r)
	}
	kv.Put(ctx, &dkvpb.PutRequest{Key: []byte("b/1"), Value: []byte("x")})
	p, _ := kv.Put(ctx, &dkvpb.PutRequest{Key: []byte("a"), Value: []byte("y")})
	got := map[int64]string{}
	for len(got) < 2 {
		r := recv()
		got[r.WatchId] = fmt.Sprintf("%s %s=%s", r.Events[0].Type, r.Events[0].Kv.Key, r.Events[0].Kv.Value)
	}
	if got[7] != "PUT a=y" || got[second] != "PUT b/1=x" {
		t.Fatalf("events %v", got)
	}
	st.Send(&dkvpb.WatchRequest{RequestUnion: &dkvpb.WatchRequest_ProgressRequest{ProgressRequest: &dkvpb.WatchProgressRequest{}}})
	for seen := map[int64]bool{}; len(seen) < 2; {
		r := recv()
		if len(r.Events) != 0 || r.Header.Revision < p.Header.Revision {
			t.Fatalf("progress %v, want no events at >= %d", r, p.Header.Revision)
		}
		seen[r.WatchId] = true
	}
	st.Send(&dkvpb.WatchRequest{RequestUnion: &dkvpb.WatchRequest_CancelRequest{CancelRequest: &dkvpb.WatchCancelRequest{WatchId: 7}}})
	if r := recv(); !r.Canceled || r.WatchId != 7 {
		t.Fatalf("cancel: %v", r)
	}
	kv.Put(ctx, &dkvpb.PutRequest{Key: []byte("a"), Value: []byte("z")})
	kv.Put(ctx, &dkvpb.PutRequest{Key: []byte("b/1"), Value: []byte("w")})
	if r := recv(); r.WatchId != second || r.Events[0].PrevKv == nil || string(r.Events[0].PrevKv.Value) != "x" {
		t.Fatalf("after cancel: %v", r)
	}
	// Half-closing the request side keeps the watches running.
	st.CloseSend()
	kv.Put(ctx, &dkvpb.PutRequest{Key: []byte("b/2"), Value: []byte("v")})
	if r := recv(); r.WatchId != second || string(r.Events[0].Kv.Key) != "b/2" {
		t.Fatalf("after CloseSend: %v", r)
	}
}

// TestWatchHTTP reads the newline-delimited JSON stream of GET /v1/watch.
func TestWatchHTTP(t *testing.T) {
	srv := startSingle(t, testutil.FreeAddr(t))
	conn := rawConn(t, srv.ClientAddr())
	kv := dkvpb.NewKVClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	kv.Put(ctx, &dkvpb.PutRequest{Key: []byte("jobs/1"), Value: []byte("a")})
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+srv.HTTPAddr()+"/v1/watch?key=jobs/&prefix=true&snapshot=true", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	line := func() *dkvpb.WatchResponse {
		if !sc.Scan() {
			t.Fatalf("stream ended: %v", sc.Err())
		}
		r := &dkvpb.WatchResponse{}
		if err := protojson.Unmarshal(sc.Bytes(), r); err != nil {
			t.Fatalf("%s: %v", sc.Text(), err)
		}
		return r
	}
	if r := line(); !r.Created {
		t.Fatalf("created: %v", r)
	}
	if r := line(); !r.SnapshotEnd || len(r.Snapshot) != 1 || string(r.Snapshot[0].Value) != "a" {
		t.Fatalf("snapshot: %v", r)
	}
	kv.Put(ctx, &dkvpb.PutRequest{Key: []byte("jobs/2"), Value: []byte("b")})
	if r := line(); len(r.Events) != 1 || string(r.Events[0].Kv.Key) != "jobs/2" {
		t.Fatalf("event: %v", r)
	}
	// Every event names its type, a put as well as a delete (protojson
	// alone leaves out PUT, the enum's zero).
	if !strings.Contains(sc.Text(), `"type":"PUT"`) {
		t.Fatalf("put event without \"type\":\"PUT\": %s", sc.Text())
	}
	kv.DeleteRange(ctx, &dkvpb.DeleteRangeRequest{Key: []byte("jobs/2")})
	if r := line(); len(r.Events) != 1 || r.Events[0].Type != dkvpb.Event_DELETE || !strings.Contains(sc.Text(), `"type":"DELETE"`) {
		t.Fatalf("delete event: %s", sc.Text())
	}

	// A compacted start revision is a 410 with the compact revision.
	p, _ := kv.Put(ctx, &dkvpb.PutRequest{Key: []byte("jobs/3"), Value: []byte("c")})
	kv.Compact(ctx, &dkvpb.CompactRequest{Revision: p.Header.Revision})
	r2, err := http.Get("http://" + srv.HTTPAddr() + "/v1/watch?key=jobs/&prefix=true&rev=1")
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	if r2.StatusCode != http.StatusGone || r2.Header.Get("X-Dkv-Compact-Revision") != fmt.Sprint(p.Header.Revision) {
		t.Fatalf("compacted watch: %d %v", r2.StatusCode, r2.Header)
	}
}

// watchRange is a key selection of the property test.
type watchRange struct {
	name      string
	key, end  string // end "" = single key
	prefix    bool
	snapshot  bool
	startBack int64 // start this many revisions in the past (0 = now)
}

func (r watchRange) contains(k string) bool {
	switch {
	case r.prefix:
		return strings.HasPrefix(k, r.key)
	case r.end == "":
		return k == r.key
	}
	return k >= r.key && k < r.end
}

func (r watchRange) opts() []client.WatchOption {
	var o []client.WatchOption
	switch {
	case r.prefix:
		o = append(o, client.WithPrefix())
	case r.end != "":
		o = append(o, client.WithRange(r.end))
	}
	return o
}

type seenEvent struct {
	rev   int64
	typ   client.EventType
	key   string
	value string
}

type propWatcher struct {
	rng      watchRange
	w        *client.Watch
	start    int64 // first revision
	snapshot map[string]string
	mu       sync.Mutex
	events   []seenEvent
	batches  []int64 // revision of each batch, in order
	err      error
	done     chan struct{}
}

// TestWatchProperty: random writers and watchers (random ranges, random
// starts, some with snapshots) on a 3-node cluster while the leader and
// then another node are killed and restarted. Every watcher must see
// exactly the history of its range from its start: no gap, duplicate or
// reordering. The reference history is a fresh watch per watcher, read
// after the faults from a healthy node, itself checked against Range at
// sampled revisions. Replay a failure with -watch.seed.
func TestWatchProperty(t *testing.T) {
	seed := *watchSeed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Logf("seed %d (replay: go test ./tests -run TestWatchProperty -args -watch.seed=%d)", seed, seed)
	rnd := rand.New(rand.NewSource(seed))
	c := servertest.NewCluster(t, 3, server.Config{})
	var eps []string
	for _, nd := range c.Nodes {
		eps = append(eps, nd.Cfg.ClientAddr)
	}
	newClient := func() *client.Client {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cl, err := client.New(ctx, client.Config{Endpoints: eps, AutoSyncInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Writers: puts, deletes, multi-key txns and prefix deletes on a small
	// keyspace, so ranges see every kind of event. Errors (during
	// failover) are fine: the reference is what the store committed.
	keys := func(r *rand.Rand) string { return fmt.Sprintf("k/%c/%d", 'a'+rune(r.Intn(3)), r.Intn(4)) }
	var acked atomic.Int64
	var wwg sync.WaitGroup
	stopWriters := make(chan struct{})
	for g := 0; g < 3; g++ {
		cl := newClient()
		r := rand.New(rand.NewSource(seed + int64(g) + 1))
		wwg.Add(1)
		go func() {
			defer wwg.Done()
			for i := 0; ; i++ {
				select {
				case <-stopWriters:
					return
				default:
				}
				wctx, wcancel := context.WithTimeout(ctx, time.Second)
				var err error
				switch n := r.Intn(20); {
				case n < 12:
					_, err = cl.Put(wctx, keys(r), []byte(fmt.Sprintf("v%d-%d", g, i)))
				case n < 16:
					_, err = cl.Delete(wctx, keys(r))
				case n < 19:
					k1, k2 := keys(r), keys(r)
					if k1 == k2 {
						k2 += "x"
					}
					_, err = cl.Txn(wctx).Then(client.OpPut(k1, []byte(fmt.Sprintf("t%d-%d", g, i))), client.OpDelete(k2)).Commit()
				default:
					_, err = cl.Delete(wctx, fmt.Sprintf("k/%c/", 'a'+rune(r.Intn(3))), client.WithPrefix())
				}
				wcancel()
				if err == nil {
					acked.Add(1)
				}
			}
		}()
	}

	ranges := []watchRange{
		{name: "all", key: "k/", prefix: true},
		{name: "b", key: "k/b/", prefix: true},
		{name: "key", key: "k/a/1"},
		{name: "range", key: "k/a/2", end: "k/c/1"},
	}
	var watchers []*propWatcher
	var wmu sync.Mutex
	startWatcher := func(i int) {
		rng := ranges[rnd.Intn(len(ranges))]
		switch rnd.Intn(3) {
		case 0:
			rng.snapshot = true
		case 1:
			rng.startBack = 1 + rnd.Int63n(50)
		}
		cl := newClient()
		opts := rng.opts()
		if rng.snapshot {
			opts = append(opts, client.WithInitialSnapshot())
		}
		var w *client.Watch
		var err error
		for attempt := 0; attempt < 50; attempt++ {
			o := opts
			if rng.startBack > 0 {
				st, serr := cl.Status(ctx)
				if serr != nil {
					continue
				}
				o = append(o, client.WithStartRevision(max(1, st.GetHeader().GetRevision()-rng.startBack)))
			}
			if w, err = cl.WatchKey(ctx, rng.key, o...); err == nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			t.Errorf("watcher %d (%s) could not start: %v", i, rng.name, err)
			return
		}
		pw := &propWatcher{rng: rng, w: w, start: w.StartRevision(), done: make(chan struct{})}
		if init := w.Initial(); init != nil {
			pw.snapshot = map[string]string{}
			for _, kv := range init.KVs {
				pw.snapshot[kv.Key] = string(kv.Value)
			}
		}
		wmu.Lock()
		watchers = append(watchers, pw)
		wmu.Unlock()
		go func() {
			defer close(pw.done)
			for b := range w.Events() {
				pw.mu.Lock()
				pw.batches = append(pw.batches, b.Revision)
				for _, e := range b.Events {
					pw.events = append(pw.events, seenEvent{e.Revision, e.Type, e.KV.Key, string(e.KV.Value)})
				}
				pw.mu.Unlock()
			}
			pw.mu.Lock()
			pw.err = w.Err()
			pw.mu.Unlock()
		}()
	}

	// Schedule: watchers start throughout; the leader dies at ~1.5s and
	// returns at ~3s; another node dies at ~4.5s and returns at ~6s.
	phase := func(d time.Duration) { time.Sleep(d) }
	for i := 0; i < 4; i++ {
		startWatcher(i)
	}
	phase(1500 * time.Millisecond)
	killed := c.Leader()
	if killed == nil {
		killed = c.WaitLeader()
	}
	t.Logf("killing leader %s", killed.Name)
	c.Stop(killed)
	for i := 4; i < 7; i++ {
		startWatcher(i)
	}
	phase(1500 * time.Millisecond)
	c.Start(killed)
	for i := 7; i < 10; i++ {
		startWatcher(i)
	}
	phase(1500 * time.Millisecond)
	var second *servertest.Node
	for _, nd := range c.Nodes {
		if nd != killed && nd.Running() {
			second = nd
			if !nd.Srv.IsLeader() {
				break
			}
		}
	}
	t.Logf("killing %s", second.Name)
	c.Stop(second)
	for i := 10; i < 12; i++ {
		startWatcher(i)
	}
	phase(1500 * time.Millisecond)
	c.Start(second)
	phase(500 * time.Millisecond)
	close(stopWriters)
	wwg.Wait()

	// A last txn touches every watched range, so every watcher's
	// revision reaches it.
	ref := newClient()
	var final int64
	testutil.Eventually(t, 10*time.Second, "final write", func() bool {
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		defer rcancel()
		r, err := ref.Txn(rctx).Then(client.OpPut("k/a/1", []byte("end")), client.OpPut("k/b/0", []byte("end"))).Commit()
		if err != nil {
			return false
		}
		final = r.Revision
		return true
	})
	t.Logf("final revision %d, %d writes acknowledged, %d watchers", final, acked.Load(), len(watchers))
	if len(watchers) < 10 {
		t.Fatalf("only %d watchers started", len(watchers))
	}
	rangeAt := func(rev int64) map[string]string {
		if rev == 0 {
			return map[string]string{} // WithRev(0) would mean "now"
		}
		var r *client.RangeResult
		testutil.Eventually(t, 10*time.Second, fmt.Sprintf("range at %d", rev), func() bool {
			rctx, rcancel := context.WithTimeout(ctx, time.Second)
			defer rcancel()
			var err error
			r, err = ref.Range(rctx, "k/", client.WithPrefix(), client.WithRev(rev))
			return err == nil
		})
		m := map[string]string{}
		for _, kv := range r.KVs {
			m[kv.Key] = string(kv.Value)
		}
		return m
	}
	for i, pw := range watchers {
		// Wait until the watcher has caught up with the final revision
		// (it may have events up to it, or nothing more to see).
		testutil.Eventually(t, 15*time.Second, fmt.Sprintf("watcher %d at %d", i, final), func() bool {
			return pw.w.Revision() >= final || pw.w.Err() != nil
		})
		pw.w.Stop()
		<-pw.done
		if pw.err != nil {
			t.Fatalf("watcher %d (%s from %d) failed: %v", i, pw.rng.name, pw.start, pw.err)
		}
		// Reference: a fresh watch from the same start, after the faults.
		rw, err := ref.WatchKey(ctx, pw.rng.key, append(pw.rng.opts(), client.WithStartRevision(pw.start))...)
		if err != nil {
			t.Fatalf("reference watch from %d: %v", pw.start, err)
		}
		var want []seenEvent
		for last := int64(0); last < final; {
			select {
			case b := <-rw.Events():
				last = b.Revision
				for _, e := range b.Events {
					want = append(want, seenEvent{e.Revision, e.Type, e.KV.Key, string(e.KV.Value)})
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("reference watch stuck at %d", rw.Revision())
			}
		}
		rw.Stop()
		// The reference rebuilds Range at sampled revisions.
		base := rangeAt(pw.start - 1)
		filter := func(m map[string]string) map[string]string {
			out := map[string]string{}
			for k, v := range m {
				if pw.rng.contains(k) {
					out[k] = v
				}
			}
			return out
		}
		state := filter(base)
		if pw.snapshot != nil && fmt.Sprint(pw.snapshot) != fmt.Sprint(state) {
			t.Fatalf("watcher %d: snapshot at %d is %v, Range says %v", i, pw.start-1, pw.snapshot, state)
		}
		samples := map[int64]bool{final: true}
		for j := 0; j < 5; j++ {
			samples[pw.start+rnd.Int63n(final-pw.start+1)] = true
		}
		var sampleRevs []int64
		for r := range samples {
			sampleRevs = append(sampleRevs, r)
		}
		sort.Slice(sampleRevs, func(a, b int) bool { return sampleRevs[a] < sampleRevs[b] })
		k := 0
		for _, sr := range sampleRevs {
			for ; k < len(want) && want[k].rev <= sr; k++ {
				if want[k].typ == client.EventPut {
					state[want[k].key] = want[k].value
				} else {
					delete(state, want[k].key)
				}
			}
			if got := filter(rangeAt(sr)); fmt.Sprint(got) != fmt.Sprint(state) {
				t.Fatalf("reference for watcher %d diverges from Range at %d:\nreplayed %v\nrange    %v", i, sr, state, got)
			}
		}
		// The watcher saw exactly the reference, batch by batch.
		pw.mu.Lock()
		got, batches := pw.events, pw.batches
		pw.mu.Unlock()
		for j := 1; j < len(batches); j++ {
			if batches[j] <= batches[j-1] {
				t.Fatalf("watcher %d: batch revision %d after %d", i, batches[j], batches[j-1])
			}
		}
		if len(got) != len(want) {
			t.Fatalf("watcher %d (%s from %d, snapshot %v): %d events, history has %d\nfirst difference at %d", i, pw.rng.name, pw.start, pw.rng.snapshot, len(got), len(want), firstDiff(got, want))
		}
		if d := firstDiff(got, want); d >= 0 {
			t.Fatalf("watcher %d: event %d is %+v, history has %+v", i, d, got[d], want[d])
		}
		t.Logf("watcher %d (%s, start %d, snapshot %v): %d events ok", i, pw.rng.name, pw.start, pw.rng.snapshot, len(got))
	}
}

func firstDiff(a, b []seenEvent) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// TestWatchResumesAcrossNodeLoss pins the failover path: a watch whose
// node is stopped resumes on another node without gap or duplicate.
func TestWatchResumesAcrossNodeLoss(t *testing.T) {
	c := servertest.NewCluster(t, 3, server.Config{})
	victim := c.Followers()[0]
	// A client that knows only the victim first, then everyone: its watch
	// starts on the victim.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	only, err := client.New(ctx, client.Config{Endpoints: []string{victim.Cfg.ClientAddr}, AutoSyncInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer only.Close()
	var eps []string
	for _, nd := range c.Nodes {
		eps = append(eps, nd.Cfg.ClientAddr)
	}
	all, err := client.New(ctx, client.Config{Endpoints: eps, AutoSyncInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	w, err := only.WatchPrefix(ctx, "r/")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for i := 0; i < 5; i++ {
		all.Put(ctx, fmt.Sprintf("r/%d", i), []byte("v"))
	}
	for i := 0; i < 5; i++ {
		<-w.Events()
	}
	c.Stop(victim)
	for i := 5; i < 10; i++ {
		all.Put(ctx, fmt.Sprintf("r/%d", i), []byte("v"))
	}
	// The only endpoint is gone: the watch keeps retrying; bring the node
	// back and it resumes from where it was, with nothing lost.
	c.Start(victim)
	for i := 5; i < 10; i++ {
		select {
		case b := <-w.Events():
			if len(b.Events) != 1 || b.Events[0].KV.Key != fmt.Sprintf("r/%d", i) {
				t.Fatalf("after restart got %+v, want r/%d", b, i)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("no event r/%d after restart (err %v)", i, w.Err())
		}
	}
	if err := w.Err(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}
