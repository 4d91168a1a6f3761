package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"github.com/dkv-io/dkv/server/httpapi"
	"net"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/dkv-io/dkv/internal/dkverr"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// Failed logins are throttled, so that guessing passwords costs the
// guesser time and not the node its CPU (a bcrypt check takes tens of
// milliseconds of one core):
//
//   - per (user, source address): loginFailsPerUser failures in
//     loginWindow, then every attempt from that address for that user is
//     refused at once, without a bcrypt check, until the oldest failure
//     leaves the window. The user can still log in from elsewhere, so a
//     guesser cannot lock the owner out.
//   - per source address: loginFailsPerAddr failures in loginWindow,
//     whatever the users, then every attempt from that address waits
//     likewise.
//
// At most loginChecks bcrypt checks run at once; the others wait (for as
// long as their context lets them). An unknown user's password is
// checked against a dummy hash of the same cost, so that a refusal takes
// as long whether or not the user exists.
const (
	loginWindow       = time.Minute
	loginFailsPerUser = 5
	loginFailsPerAddr = 20
)

// loginChecks is how many bcrypt checks may run at once: half the CPUs,
// so that logins never take every core from the calls that serve data.
var loginChecks = max(1, runtime.NumCPU()/2)

// loginGuard throttles failed logins and bounds the bcrypt work of
// Authenticate.
type loginGuard struct {
	cost int // bcrypt cost of the dummy hash: the stored hashes' cost

	// now and compare are the clock and the bcrypt check; tests replace
	// them (a fake clock; a counting compare).
	now     func() time.Time
	compare func(hash, pw []byte) error

	sem chan struct{}

	dummyOnce sync.Once
	dummy     []byte

	mu sync.Mutex
	// fails holds the recent failures per key: "u\x00<user>\x00<addr>"
	// and "a\x00<addr>". Entries whose failures are all older than the
	// window are pruned as the map grows.
	fails     map[string]*loginFails
	pruneSize int
}

// loginFails is one key's failures within the window, oldest first, and
// its attempts in flight (counted against the limit, so that concurrent
// guesses cannot all slip past it).
type loginFails struct {
	at       []time.Time
	inFlight int
}

func newLoginGuard(cost int) *loginGuard {
	return &loginGuard{
		cost:      cost,
		now:       time.Now,
		compare:   bcrypt.CompareHashAndPassword,
		sem:       make(chan struct{}, loginChecks),
		fails:     map[string]*loginFails{},
		pruneSize: 1024,
	}
}

// userKey is the throttle's key for user from addr. A long name (no
// limit binds it; only an existing user's is short) is kept as its hash,
// so a guesser's names cannot fill the memory.
func userKey(user, addr string) string {
	if len(user) > 128 {
		sum := sha256.Sum256([]byte(user))
		user = "sha256:" + hex.EncodeToString(sum[:])
	}
	return "u\x00" + user + "\x00" + addr
}
func addrKey(addr string) string { return "a\x00" + addr }

// expire drops the failures older than the window.
func (f *loginFails) expire(now time.Time) {
	i := 0
	for i < len(f.at) && now.Sub(f.at[i]) >= loginWindow {
		i++
	}
	f.at = f.at[i:]
}

// wait is how long key's attempts must wait with limit failures allowed
// in the window (0: none).
func (g *loginGuard) wait(key string, limit int, now time.Time) time.Duration {
	f := g.fails[key]
	if f == nil {
		return 0
	}
	f.expire(now)
	if len(f.at)+f.inFlight < limit {
		return 0
	}
	if len(f.at) == 0 {
		return time.Second // attempts in flight fill the window: retry shortly
	}
	// The attempt may go once enough failures have left the window.
	i := min(len(f.at)-1, len(f.at)+f.inFlight-limit)
	return f.at[i].Add(loginWindow).Sub(now)
}

func (g *loginGuard) entry(key string) *loginFails {
	f := g.fails[key]
	if f == nil {
		f = &loginFails{}
		g.fails[key] = f
	}
	return f
}

// begin admits a login attempt of user from addr, or refuses it with
// Throttled naming the wait. An admitted attempt must be ended with
// end.
func (g *loginGuard) begin(user, addr string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	uk, ak := userKey(user, addr), addrKey(addr)
	if w := g.wait(uk, loginFailsPerUser, now); w > 0 {
		shown := user
		if len(shown) > 64 {
			shown = shown[:64] + "..."
		}
		return throttled(w, "too many failed logins for %s from %s; retry in %s", shown, addr)
	}
	if w := g.wait(ak, loginFailsPerAddr, now); w > 0 {
		return throttled(w, "too many failed logins from %s; retry in %s", addr)
	}
	g.prune(now)
	g.entry(uk).inFlight++
	g.entry(ak).inFlight++
	return nil
}

// end records an admitted attempt's outcome. A success clears the
// user's failures from addr (not the address's).
func (g *loginGuard) end(user, addr string, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	uk, ak := userKey(user, addr), addrKey(addr)
	u, a := g.entry(uk), g.entry(ak)
	u.inFlight--
	a.inFlight--
	if ok {
		delete(g.fails, uk)
		return
	}
	u.at = append(u.at, now)
	a.at = append(a.at, now)
}

// abandon ends an admitted attempt that checked nothing.
func (g *loginGuard) abandon(user, addr string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.entry(userKey(user, addr)).inFlight--
	g.entry(addrKey(addr)).inFlight--
}

// prune drops the entries with no failure in the window and nothing in
// flight, once the map has doubled since the last prune.
func (g *loginGuard) prune(now time.Time) {
	if len(g.fails) < g.pruneSize {
		return
	}
	for k, f := range g.fails {
		if f.expire(now); len(f.at) == 0 && f.inFlight == 0 {
			delete(g.fails, k)
		}
	}
	g.pruneSize = max(1024, 2*len(g.fails))
}

// throttled is the Throttled error for a wait of w, rounded up to whole
// seconds; format's last verb is the wait.
func throttled(w time.Duration, format string, args ...any) error {
	secs := (w + time.Second - 1) / time.Second
	err := dkverr.New(dkverr.Throttled, format, append(args, strconv.FormatInt(int64(secs), 10)+"s")...)
	err.Metadata = map[string]string{"retry_after_ms": strconv.FormatInt(w.Milliseconds(), 10)}
	return err
}

// check compares pw with hash, or with the dummy hash when hash is nil
// (no such user, or a user without a password), waiting for a free
// bcrypt slot as long as ctx allows.
func (g *loginGuard) check(ctx context.Context, hash []byte, pw string) (bool, error) {
	select {
	case g.sem <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	defer func() { <-g.sem }()
	if hash == nil {
		g.dummyOnce.Do(func() {
			g.dummy, _ = bcrypt.GenerateFromPassword([]byte("dkv: no such user"), g.cost)
		})
		_ = g.compare(g.dummy, []byte(pw))
		return false, nil
	}
	return g.compare(hash, []byte(pw)) == nil, nil
}

// loginSource is the address a login comes from, without its port: the
// HTTP client's for a call through the gateway, the connection's peer
// otherwise ("inprocess" for the node's own in-process callers).
func loginSource(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return "unknown"
	}
	if _, gw := p.Addr.(gatewayAddr); gw {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get(gatewayClientAddrHeader); len(v) == 1 && v[0] != "" {
			return hostOf(v[0])
		}
		return "http-gateway"
	}
	if p.Addr.Network() != "tcp" {
		return p.Addr.Network()
	}
	return hostOf(p.Addr.String())
}

func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// gatewayClientAddrHeader is the metadata the HTTP gateway passes the
// HTTP client's address in; believed only on the gateway's own
// in-process connection, and no HTTP header can set it.
const gatewayClientAddrHeader = httpapi.ClientAddrMetadata
