package server

import (
	"context"
	"github.com/dkv-io/dkv/internal/testutil"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// loginServer is a started server with auth on (root/rootpw,
// alice/alicepw), the login guard's clock and bcrypt compare replaced
// (an advanceable clock; a compare that counts its calls) before it
// starts. It returns the clock's offset, the compare count and the log.
func loginServer(t *testing.T) (s *Server, offset *atomic.Int64, compares *atomic.Int64, logs *testutil.LockedBuffer) {
	t.Helper()
	logs = &testutil.LockedBuffer{}
	s, err := New(Config{DataDir: t.TempDir(), ClientAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		TickInterval: 10 * time.Millisecond, NoSync: true, AuthBcryptCost: bcrypt.MinCost,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	offset, compares = &atomic.Int64{}, &atomic.Int64{}
	t0 := time.Now()
	s.logins.now = func() time.Time { return t0.Add(time.Duration(offset.Load())) }
	s.logins.compare = func(h, pw []byte) error { compares.Add(1); return bcrypt.CompareHashAndPassword(h, pw) }
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ac := dkvpb.NewAuthClient(startInProcess(t, s))
	for _, step := range []func() error{
		func() error {
			_, err := ac.UserAdd(ctx, &dkvpb.UserAddRequest{Name: "root", Password: "rootpw"})
			return err
		},
		func() error {
			_, err := ac.UserGrantRole(ctx, &dkvpb.UserRoleRequest{User: "root", Role: "root"})
			return err
		},
		func() error {
			_, err := ac.UserAdd(ctx, &dkvpb.UserAddRequest{Name: "alice", Password: "alicepw"})
			return err
		},
		func() error { _, err := ac.AuthEnable(ctx, &dkvpb.AuthEnableRequest{}); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	return s, offset, compares, logs
}

// dialFrom connects to the server's client port from the loopback
// address ip (any of 127.0.0.0/8 works as a source on Linux).
func dialFrom(t *testing.T, s *Server, ip string) *grpc.ClientConn {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	conn, err := grpc.NewClient("passthrough:///"+s.ClientAddr(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", addr)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// httpLogin authenticates through the HTTP gateway; it returns the
// status and body.
func httpLogin(t *testing.T, s *Server, name, pw string, header http.Header) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+s.HTTPAddr()+"/v1/auth/authenticate",
		strings.NewReader(`{"name":"`+name+`","password":"`+pw+`"}`))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestLoginThrottle: after 5 wrong passwords for alice from one address,
// a login for alice from there (even with the right password) is
// refused at once with ResourceExhausted naming the wait, without a
// bcrypt check, on DKV's and etcd's Authenticate alike; alice logs in
// from another address. After 20 failures from one address, any user's
// login from it waits, over gRPC and HTTP (where the HTTP client's
// address counts, not a header's). Once the failures leave the minute,
// the right password works again. The refusals are counted in /metrics
// and logged a line per kind, not a line each.
func TestLoginThrottle(t *testing.T) {
	s, offset, compares, logs := loginServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	connA, connB := dialFrom(t, s, "127.0.0.1"), dialFrom(t, s, "127.0.0.2")
	a, b := dkvpb.NewAuthClient(connA), dkvpb.NewAuthClient(connB)
	login := func(c dkvpb.AuthClient, name, pw string) (string, error) {
		r, err := c.Authenticate(ctx, &dkvpb.AuthenticateRequest{Name: name, Password: pw})
		return r.GetToken(), err
	}
	for i := range 5 {
		if _, err := login(a, "alice", "guess"); dkverr.CodeOf(err) != dkverr.Unauthenticated {
			t.Fatalf("wrong password %d: %v, want Unauthenticated", i+1, err)
		}
	}
	before := compares.Load()
	_, err := login(a, "alice", "alicepw")
	const wantUser = "too many failed logins for alice from 127.0.0.1; retry in 60s"
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), wantUser) {
		t.Fatalf("6th login for alice from 127.0.0.1: %v; want ResourceExhausted %q", err, wantUser)
	}
	if n := compares.Load() - before; n != 0 {
		t.Errorf("a throttled login ran %d bcrypt checks; want none", n)
	}
	if tok, err := login(b, "alice", "alicepw"); err != nil || tok == "" {
		t.Fatalf("alice from 127.0.0.2: %q %v; want a token", tok, err)
	}
	_, err = etcdserverpb.NewAuthClient(connA).Authenticate(ctx, &etcdserverpb.AuthenticateRequest{Name: "alice", Password: "alicepw"})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), wantUser) {
		t.Fatalf("etcd Authenticate for alice from 127.0.0.1: %v; want ResourceExhausted %q", err, wantUser)
	}

	// 15 more failures from 127.0.0.1, for other (unknown) users: 20.
	for i := range 15 {
		if _, err := login(a, "nobody"+string(rune('a'+i)), "guess"); dkverr.CodeOf(err) != dkverr.Unauthenticated {
			t.Fatalf("unknown user %d: %v, want Unauthenticated", i, err)
		}
	}
	const wantAddr = "too many failed logins from 127.0.0.1; retry in 60s"
	if _, err := login(a, "root", "rootpw"); status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), wantAddr) {
		t.Fatalf("root from 127.0.0.1 after 20 failures from it: %v; want ResourceExhausted %q", err, wantAddr)
	}
	// Over HTTP the client's own address counts; a header naming
	// another is not believed.
	spoof := http.Header{"Grpc-Metadata-Dkv-Gateway-Client-Addr": {"10.9.9.9"}, "X-Forwarded-For": {"10.9.9.9"}}
	if code, body := httpLogin(t, s, "root", "rootpw", spoof); code != http.StatusTooManyRequests || !strings.Contains(body, wantAddr) {
		t.Fatalf("HTTP login of root from 127.0.0.1: %d %s; want 429 %q", code, body, wantAddr)
	}
	rootTok, err := login(b, "root", "rootpw")
	if err != nil {
		t.Fatalf("root from 127.0.0.2: %v", err)
	}

	offset.Add(int64(loginWindow + time.Second))
	if tok, err := login(a, "alice", "alicepw"); err != nil || tok == "" {
		t.Fatalf("alice from 127.0.0.1 a minute later: %q %v; want a token", tok, err)
	}

	req, _ := http.NewRequest("GET", "http://"+s.HTTPAddr()+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+rootTok)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for series, want := range map[string]string{
		`dkv_auth_denied_total{reason="throttled"}`:       "4",
		`dkv_auth_denied_total{reason="unauthenticated"}`: "20",
	} {
		if got := sampleOf(string(body), series); got != want {
			t.Errorf("%s = %q, want %s", series, got, want)
		}
	}
	// 24 refusals, two kinds: at most a line per kind in 10 s.
	if n := strings.Count(logs.String(), "auth: call refused"); n > 2 {
		t.Errorf("24 refused logins wrote %d log lines; want at most 2 (one per kind)", n)
	}
}

// TestLoginUnknownUserChecksDummyHash: a login for an unknown user runs
// a bcrypt check (against a dummy hash of the same cost), as one for a
// known user with a wrong password does, and both are refused alike.
func TestLoginUnknownUserChecksDummyHash(t *testing.T) {
	s, _, compares, _ := loginServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := s.DialInProcess(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ac := dkvpb.NewAuthClient(conn)
	var msgs []string
	for _, name := range []string{"alice", "mallory"} {
		before := compares.Load()
		_, err := ac.Authenticate(ctx, &dkvpb.AuthenticateRequest{Name: name, Password: "guess"})
		if dkverr.CodeOf(err) != dkverr.Unauthenticated {
			t.Fatalf("%s: %v, want Unauthenticated", name, err)
		}
		if n := compares.Load() - before; n != 1 {
			t.Errorf("a wrong login for %s ran %d bcrypt checks; want 1", name, n)
		}
		msgs = append(msgs, strings.Replace(dkverr.Message(dkverr.FromGRPC(err)), name, "NAME", 1))
	}
	if msgs[0] != msgs[1] {
		t.Errorf("known and unknown user are refused differently: %q vs %q", msgs[0], msgs[1])
	}
	s.logins.dummyOnce.Do(func() {}) // orders the read after the hash's making
	if cost, err := bcrypt.Cost(s.logins.dummy); err != nil || cost != s.cfg.AuthBcryptCost {
		t.Errorf("dummy hash cost %d (%v); want the stored hashes' %d", cost, err, s.cfg.AuthBcryptCost)
	}
}
