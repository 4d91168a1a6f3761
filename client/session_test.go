package client_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/server/servertest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// lossyLink stands between the client and the server: for the method it
// is armed for, it sends the request and then reports the reply lost, as a
// connection that breaks after sending does, or first rewrites the
// request's session to one the cluster never opened.
type lossyLink struct {
	mu       sync.Mutex
	method   string
	loseNext int // replies still to lose
	forge    int // attempts still to send in a forged session
	// forgeAfterLoss: once a reply is lost, the next attempt goes in a
	// forged session.
	forgeAfterLoss bool
	sessions       []string
}

func (l *lossyLink) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	l.mu.Lock()
	armed := method == l.method
	lose, forge := armed && l.loseNext > 0, armed && l.forge > 0
	if lose {
		l.loseNext--
		if l.forgeAfterLoss {
			l.forge++
		}
	}
	if forge {
		l.forge--
	}
	if armed {
		md, _ := metadata.FromOutgoingContext(ctx)
		l.sessions = append(l.sessions, strings.Join(md.Get(dkvpb.SessionMetadata), ","))
	}
	l.mu.Unlock()
	if forge {
		md, _ := metadata.FromOutgoingContext(ctx)
		md = md.Copy()
		md.Set(dkvpb.SessionMetadata, dkvpb.FormatSession(0xdead, 1, 1))
		ctx = metadata.NewOutgoingContext(ctx, md)
	}
	err := invoker(ctx, method, req, reply, cc, opts...)
	if lose && err == nil {
		return status.Error(codes.Unavailable, "connection reset after the request was sent (lossyLink)")
	}
	return err
}

func lossyClient(t *testing.T, l *lossyLink, ttl time.Duration) *client.Client {
	t.Helper()
	n := servertest.Start(t, servertest.WithClientPort())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Endpoints: []string{n.Srv.ClientAddr()}, AutoSyncInterval: -1,
		SessionTTL: ttl, DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(l.intercept)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	servertest.WaitSessions(t, c)
	return c
}

// TestLostReplyAppliesOnce: the reply to a counter increment is lost
// after the server applied it. The client sends it again in its session
// and gets the first reply: the caller sees success, and the counter
// moved once.
func TestLostReplyAppliesOnce(t *testing.T) {
	l := &lossyLink{method: dkvpb.KV_Counter_FullMethodName}
	c := lossyClient(t, l, 0)
	ctx := context.Background()
	if _, err := c.Counter(ctx, "n", 1); err != nil { // opens the session
		t.Fatal(err)
	}
	l.mu.Lock()
	l.loseNext = 2
	l.mu.Unlock()
	v, err := c.Counter(ctx, "n", 1)
	if err != nil {
		t.Fatalf("increment whose replies were lost twice: %v; want it sent again until answered", err)
	}
	if v != 2 {
		t.Fatalf("the increment answered %d, want 2 (the reply of its one application)", v)
	}
	kv, err := c.Get(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	if string(kv.Value) != "2" {
		t.Fatalf("counter is %s after two increments, one of them sent three times; want 2", kv.Value)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// The three attempts of the second increment carry one session and
	// one sequence.
	att := l.sessions[len(l.sessions)-3:]
	if att[0] == "" || att[0] != att[1] || att[1] != att[2] {
		t.Fatalf("attempts carried sessions %q; want the same id and sequence each time", att)
	}
}

// TestLostReplyWithoutSessions: with sessions off, the client keeps
// etcd's behaviour: a write whose reply was lost is ErrUnknownOutcome,
// and is not sent again.
func TestLostReplyWithoutSessions(t *testing.T) {
	l := &lossyLink{method: dkvpb.KV_Counter_FullMethodName, loseNext: 1}
	c := lossyClient(t, l, -1)
	_, err := c.Counter(context.Background(), "n", 1)
	if !errors.Is(err, client.ErrUnknownOutcome) {
		t.Fatalf("lost reply without sessions: %v, want ErrUnknownOutcome", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.sessions) != 1 || l.sessions[0] != "" {
		t.Fatalf("attempts %q: want one, with no session", l.sessions)
	}
}

// TestExpiredSessionReopens: a write refused because its session is
// unknown was not applied; the client opens a new session and the write
// applies once.
func TestExpiredSessionReopens(t *testing.T) {
	l := &lossyLink{method: dkvpb.KV_Put_FullMethodName}
	c := lossyClient(t, l, 0)
	ctx := context.Background()
	if _, err := c.Put(ctx, "k", []byte("1")); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	l.forge = 1
	l.mu.Unlock()
	if _, err := c.Put(ctx, "k", []byte("2")); err != nil {
		t.Fatalf("put refused for an unknown session: %v; want it sent again in a new session", err)
	}
	kv, err := c.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if string(kv.Value) != "2" || kv.Version != 2 {
		t.Fatalf("k = %q version %d, want \"2\" at version 2", kv.Value, kv.Version)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	first, last := sessionID(l.sessions[0]), sessionID(l.sessions[len(l.sessions)-1])
	if first == last {
		t.Fatalf("the put after the refusal went in session %s again; want a new one", last)
	}
}

// TestExpiredSessionAfterUnknownOutcome: a write whose first attempt may
// have applied cannot be sent again once its session is gone: the caller
// gets ErrUnknownOutcome, wrapping ErrSessionExpired, never a second
// application.
func TestExpiredSessionAfterUnknownOutcome(t *testing.T) {
	l := &lossyLink{method: dkvpb.KV_Counter_FullMethodName}
	c := lossyClient(t, l, 0)
	ctx := context.Background()
	if _, err := c.Counter(ctx, "n", 1); err != nil {
		t.Fatal(err)
	}
	// The first attempt applies and its reply is lost; the second goes
	// in a session the cluster does not know.
	l.mu.Lock()
	l.loseNext, l.forgeAfterLoss = 1, true
	l.mu.Unlock()
	_, err := c.Counter(ctx, "n", 1)
	if !errors.Is(err, client.ErrUnknownOutcome) || !errors.Is(err, client.ErrSessionExpired) {
		t.Fatalf("increment sent, reply lost, session then gone: %v; want ErrUnknownOutcome wrapping ErrSessionExpired", err)
	}
	kv, err := c.Get(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	if string(kv.Value) != "2" {
		t.Fatalf("counter %s, want 2: the first attempt applied, and only it", kv.Value)
	}
}

func sessionID(v string) string {
	id, _, _ := strings.Cut(v, ":")
	return id
}

// TestSessionTTLBounds: a session TTL outside 1s to 1h is refused by
// client.New, naming the bounds; negative turns sessions off.
func TestSessionTTLBounds(t *testing.T) {
	for _, ttl := range []time.Duration{time.Millisecond, 2 * time.Hour} {
		cfg := client.Config{Endpoints: []string{"127.0.0.1:1"}, SessionTTL: ttl}
		cfg.EnsureDefaults()
		if err := cfg.Validate(); !errors.Is(err, client.ErrInvalidInput) || !strings.Contains(err.Error(), "1s to 1h") {
			t.Errorf("SessionTTL %v: %v, want ErrInvalidInput naming 1s to 1h", ttl, err)
		}
	}
	for _, ttl := range []time.Duration{-1, 0, time.Second, time.Hour} {
		cfg := client.Config{Endpoints: []string{"127.0.0.1:1"}, SessionTTL: ttl}
		cfg.EnsureDefaults()
		if err := cfg.Validate(); err != nil {
			t.Errorf("SessionTTL %v: %v, want accepted", ttl, err)
		}
	}
}
