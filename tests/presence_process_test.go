package tests

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/concurrency"
	"github.com/dkv-io/dkv/client/recipe"
)

// The member process of the presence test is this test binary run again
// with DKV_PRESENCE_MEMBER=ENDPOINT,GROUP,ID: it registers ID in GROUP on
// a session with presenceTTL, prints "registered", and waits to be killed.
const presenceEnv = "DKV_PRESENCE_MEMBER"

const presenceTTL = 2 * time.Second

func TestPresenceMemberProcessHelper(t *testing.T) {
	spec := os.Getenv(presenceEnv)
	if spec == "" {
		t.Skip("the member process of the presence process test, run by it")
	}
	parts := strings.Split(spec, ",")
	ctx := context.Background()
	c, err := client.New(ctx, client.Config{Endpoints: []string{parts[0]}, DialTimeout: 10 * time.Second, AutoSyncInterval: -1})
	if err != nil {
		fmt.Println("error", err)
		return
	}
	s, err := concurrency.NewSession(ctx, c, concurrency.WithTTL(presenceTTL))
	if err != nil {
		fmt.Println("error", err)
		return
	}
	if _, err := recipe.Register(ctx, s, parts[1], parts[2], []byte("pid "+fmt.Sprint(os.Getpid()))); err != nil {
		fmt.Println("error", err)
		return
	}
	fmt.Println("registered")
	<-s.Done()
}

// A registered member process killed with SIGKILL leaves the group once
// its session lease expires: within the TTL plus a bounded delay, a
// watcher that saw it join sees it leave, and Members no longer lists it.
func TestPresenceKilledMemberLeaves(t *testing.T) {
	if testing.Short() {
		t.Skip("runs member processes")
	}
	c, cl := queueNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mw, err := recipe.WatchMembers(ctx, cl, "svc")
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Close()

	cmd := exec.Command(os.Args[0], "-test.run=^TestPresenceMemberProcessHelper$", "-test.v")
	cmd.Env = append(os.Environ(), presenceEnv+"="+c.Nodes[0].Cfg.ClientAddr+",svc,m1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	registered := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			if l := s.Text(); l == "registered" || strings.HasPrefix(l, "error ") {
				registered <- l
			}
		}
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	select {
	case l := <-registered:
		if l != "registered" {
			t.Fatalf("member process: %s", l)
		}
	case <-exited:
		t.Fatal("member process exited before registering")
	case <-ctx.Done():
		t.Fatal("member process never registered")
	}
	ev := <-mw.Events()
	if ev.Type != recipe.MemberJoin || ev.Member.ID != "m1" {
		t.Fatalf("first event %v %s, want join m1", ev.Type, ev.Member.ID)
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	killed := time.Now()
	ev, ok := <-mw.Events()
	if !ok {
		t.Fatalf("member events closed: %v", ctx.Err())
	}
	left := time.Since(killed)
	if ev.Type != recipe.MemberLeave || ev.Member.ID != "m1" {
		t.Fatalf("after the kill: event %v %s, want leave m1", ev.Type, ev.Member.ID)
	}
	// The lease expires at most TTL after its last renewal; the leader's
	// expiry check and the watch delivery add a bounded delay.
	const bound = presenceTTL + 5*time.Second
	if left > bound {
		t.Fatalf("leave seen %v after the kill, more than TTL %v + 5s", left, presenceTTL)
	}
	ms, _, err := recipe.Members(ctx, cl, "svc")
	if err != nil || len(ms) != 0 {
		t.Fatalf("Members after the leave: %v, %v", ms, err)
	}
	t.Logf("leave seen %v after SIGKILL (TTL %v)", left, presenceTTL)
}
