package tests

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
)

// The consumer process of these tests is this test binary run again with
// DKV_QUEUE_CONSUMER set: it claims one job of the queue, writes
// "claimed ID ATTEMPT" to stdout, then for each line "finish" on stdin
// tries to write its result WithClaim and to ack, and reports both.
const consumerEnv = "DKV_QUEUE_CONSUMER"

func TestQueueConsumerProcessHelper(t *testing.T) {
	spec := os.Getenv(consumerEnv)
	if spec == "" {
		t.Skip("the consumer process of the queue process tests, run by them")
	}
	endpoint, name, _ := strings.Cut(spec, ",")
	ctx := context.Background()
	c, err := client.New(ctx, client.Config{Endpoints: []string{endpoint}, DialTimeout: 10 * time.Second, AutoSyncInterval: -1})
	if err != nil {
		fmt.Println("error", err)
		return
	}
	q, err := recipe.NewQueue(c, name, recipe.WithVisibilityTimeout(2*time.Second))
	if err != nil {
		fmt.Println("error", err)
		return
	}
	j, err := q.Claim(ctx)
	if err != nil {
		fmt.Println("error", err)
		return
	}
	fmt.Printf("claimed %s %d\n", j.ID, j.Attempt)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		_, perr := c.Put(ctx, "result/"+j.ID, []byte("from the helper"), recipe.WithClaim(j))
		aerr := j.Ack(ctx)
		fmt.Printf("put=%s ack=%s\n", outcome(perr), outcome(aerr))
	}
}

func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, recipe.ErrClaimExpired):
		return "expired"
	case errors.Is(err, client.ErrLocked):
		return "locked"
	}
	return strings.ReplaceAll(err.Error(), " ", "_")
}

type consumerProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	exited chan struct{}
}

func startConsumer(t *testing.T, endpoint, queue string) *consumerProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestQueueConsumerProcessHelper$", "-test.v")
	cmd.Env = append(os.Environ(), consumerEnv+"="+endpoint+","+queue)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &consumerProc{cmd: cmd, stdin: stdin, lines: make(chan string, 16), exited: make(chan struct{})}
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			if l := s.Text(); strings.HasPrefix(l, "claimed ") || strings.HasPrefix(l, "put=") || strings.HasPrefix(l, "error ") {
				p.lines <- l
			}
		}
		cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		<-p.exited
	})
	return p
}

func (p *consumerProc) line(t *testing.T) string {
	t.Helper()
	select {
	case l := <-p.lines:
		if strings.HasPrefix(l, "error ") {
			t.Fatalf("consumer process: %s", l)
		}
		return l
	case <-p.exited:
		t.Fatal("consumer process exited")
	case <-time.After(60 * time.Second):
		t.Fatal("consumer process said nothing for 60s")
	}
	return ""
}

func queueNode(t *testing.T) (*servertest.Cluster, *client.Client) {
	t.Helper()
	c := servertest.NewCluster(t, 1, server.Config{})
	cl, err := client.New(context.Background(), client.Config{Endpoints: []string{c.Nodes[0].Cfg.ClientAddr}, DialTimeout: 10 * time.Second, AutoSyncInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return c, cl
}

// A consumer process killed with SIGKILL while it holds a job: after the
// visibility timeout another consumer claims the job (attempt 2) and acks
// it, once.
func TestQueueConsumerKilledJobClaimedAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("runs consumer processes")
	}
	c, cl := queueNode(t)
	q, err := recipe.NewQueue(cl, "kill9", recipe.WithVisibilityTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, err := q.Enqueue(ctx, []byte("work"))
	if err != nil {
		t.Fatal(err)
	}
	p := startConsumer(t, c.Nodes[0].Cfg.ClientAddr, "kill9")
	if l := p.line(t); l != fmt.Sprintf("claimed %s 1", e.ID) {
		t.Fatalf("consumer process: %q", l)
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited

	j, err := q.Claim(ctx) // returns once the dead consumer's claim expired
	if err != nil {
		t.Fatal(err)
	}
	if j.ID != e.ID || j.Attempt != 2 {
		t.Fatalf("claimed %s attempt %d, want %s attempt 2", j.ID, j.Attempt, e.ID)
	}
	if _, err := cl.Put(ctx, "result/"+j.ID, []byte("done"), recipe.WithClaim(j)); err != nil {
		t.Fatal(err)
	}
	if err := j.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := q.Stats(ctx)
	if err != nil || st.Visible+st.Claimed+st.Scheduled+st.Dead != 0 {
		t.Fatalf("after the ack: %+v %v", st, err)
	}
	if r, err := cl.Get(ctx, "result/"+j.ID); err != nil || string(r.Value) != "done" || r.Version != 1 {
		t.Fatalf("result %+v %v: want one write, by the second consumer", r, err)
	}
}

// A consumer process paused (SIGSTOP) past its visibility timeout, then
// resumed (SIGCONT) after another consumer claimed its job, can neither
// write WithClaim nor ack: its late result is not applied.
func TestQueuePausedConsumerCannotAck(t *testing.T) {
	if testing.Short() {
		t.Skip("runs consumer processes")
	}
	c, cl := queueNode(t)
	q, err := recipe.NewQueue(cl, "stop", recipe.WithVisibilityTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, err := q.Enqueue(ctx, []byte("work"))
	if err != nil {
		t.Fatal(err)
	}
	p := startConsumer(t, c.Nodes[0].Cfg.ClientAddr, "stop")
	if l := p.line(t); l != fmt.Sprintf("claimed %s 1", e.ID) {
		t.Fatalf("consumer process: %q", l)
	}
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	j, err := q.Claim(ctx) // returns once the paused consumer's claim expired
	if err != nil {
		t.Fatal(err)
	}
	if j.ID != e.ID || j.Attempt != 2 {
		t.Fatalf("claimed %s attempt %d, want %s attempt 2", j.ID, j.Attempt, e.ID)
	}
	if _, err := io.WriteString(p.stdin, "finish\n"); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if l := p.line(t); l != "put=locked ack=expired" {
		t.Fatalf("the resumed consumer's late result: %q, want put=locked ack=expired", l)
	}
	if _, err := cl.Get(ctx, "result/"+j.ID); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("the late result was applied: %v", err)
	}
	if err := j.Ack(ctx); err != nil {
		t.Fatalf("the current claim's ack: %v", err)
	}
}
