package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/state"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Client sessions (internal/state/session.go): a client's write carries
// its session in the gRPC metadata dkvpb.SessionMetadata; propose copies
// it into the command.

// sessionSweep is how often the leader looks for expired sessions, and
// maxSessionsPerExpire how many one SessionExpire drops at most.
const (
	sessionSweep         = 10 * time.Second
	maxSessionsPerExpire = 1000
)

// Members of versions before 0.2 do not apply sessions: they would apply
// a write sent again a second time where the others answer it from the
// session, and their states would differ. So sessions are offered only
// while every member publishes 0.2 or later: SessionOpen answers
// Unimplemented otherwise (as an older server does), and a write in a
// session is refused, unapplied, with SessionExpired; the Go client then
// writes without a session, as before.
const sessionsSince = 2 // minor version, major 0

// sessionsCheck caches sessionsAvailable's answer for a second: it is
// asked on every write in a session.
type sessionsCheck struct {
	mu   sync.Mutex
	at   time.Time
	last error
}

// sessionsAvailable says why sessions cannot be used now, or nil.
func (s *Server) sessionsAvailable() error {
	c := &s.sessCheck
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := time.Now(); now.Sub(c.at) > time.Second {
		c.at, c.last = now, s.membersApplySessions()
	}
	return c.last
}

func (s *Server) membersApplySessions() error {
	ms, err := state.Members(s.store.DB())
	if err != nil {
		return err
	}
	for _, m := range ms {
		major, minor, err := parseVersion(m.GetVersion())
		if err != nil || (major == 0 && minor < sessionsSince) {
			v := m.GetVersion()
			if v == "" {
				v = "no version yet"
			}
			return fmt.Errorf("client sessions are not available: member %x (%s) runs %s, and every member must run dkv 0.%d or later", m.GetId(), m.GetName(), v, sessionsSince)
		}
	}
	return nil
}

// stampSession sets req's session from ctx's metadata, if it carries one,
// and the entry's time, which sessions are measured on.
func (s *Server) stampSession(ctx context.Context, req *dkvpb.InternalRequest) error {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return nil
	}
	v := md.Get(dkvpb.SessionMetadata)
	if len(v) == 0 {
		return nil
	}
	cs, err := dkvpb.ParseSession(v[0])
	if err != nil {
		return dkverr.New(dkverr.InvalidInput, "%v", err)
	}
	if _, ok := req.GetRequest().(*dkvpb.InternalRequest_SessionOpen); ok {
		return dkverr.New(dkverr.InvalidInput, "%s: a session is opened outside a session", dkvpb.SessionMetadata)
	}
	if err := s.sessionsAvailable(); err != nil {
		return dkverr.New(dkverr.SessionExpired, "%v; the request was not applied", err)
	}
	req.Session = cs
	if req.TimeUnixNano == 0 {
		req.TimeUnixNano = time.Now().UnixNano()
	}
	return nil
}

func (k *kvService) SessionOpen(ctx context.Context, req *dkvpb.SessionOpenRequest) (*dkvpb.SessionOpenResponse, error) {
	if err := k.s.sessionsAvailable(); err != nil {
		return nil, status.Error(codes.Unimplemented, err.Error())
	}
	return propose[*dkvpb.SessionOpenResponse](ctx, k.s, &dkvpb.InternalRequest{
		TimeUnixNano: time.Now().UnixNano(),
		Request:      &dkvpb.InternalRequest_SessionOpen{SessionOpen: req},
	})
}

// sessionLoop, on the leader, drops the sessions that have expired.
func (s *Server) sessionLoop() {
	defer s.wg.Done()
	t := time.NewTicker(sessionSweep)
	defer t.Stop()
	for {
		select {
		case <-s.stopc:
			return
		case <-t.C:
		}
		if !s.node.Status().IsLeader {
			continue
		}
		now := time.Now().UnixNano()
		ids, err := state.ExpiredSessions(s.store.DB(), now, maxSessionsPerExpire)
		if err != nil {
			s.log.Warn("list expired sessions", "err", err)
			continue
		}
		if len(ids) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), sessionSweep)
		_, err = s.proposeRequest(ctx, &dkvpb.InternalRequest{TimeUnixNano: now,
			Request: &dkvpb.InternalRequest_SessionExpire{SessionExpire: &dkvpb.SessionExpireRequest{Ids: ids}}})
		cancel()
		if err != nil {
			s.log.Debug("expire sessions", "err", err)
		}
	}
}
