package server

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/dkv-io/dkv/server/etcdapi"
	"github.com/dkv-io/dkv/server/httpapi"
	"github.com/soheilhy/cmux"
)

// The client port speaks HTTP/1.1 as well as gRPC, as etcd's client URL
// does: a client configured with that one URL (Patroni reads /version
// there first; etcdctl check datascale reads /metrics; etcd3gw speaks
// the JSON gateway) finds etcd's HTTP endpoints on it
// (httpapi.EtcdClientHandler). A connection is told apart by its first
// bytes (cmux, as etcd does it): HTTP/2's preface goes to the gRPC
// server, an HTTP/1 request line to the HTTP server, anything else is
// closed. DKV's own HTTP API and the dashboard stay on the HTTP port.
//
// With TLS on the client port the handshake comes first, and ALPN tells
// the two apart (serveClientTLS): a client that offers only h2 (every gRPC
// client: gRPC over TLS negotiates h2 by ALPN) goes to the gRPC server,
// which takes the finished handshake as its own (tlsExceptInProcess); a
// client that offers HTTP/1.1 (curl, browsers, Python's HTTP libraries) is
// answered with it, and one that offers nothing speaks HTTP/1.1 too; both
// go to the HTTP server. An HTTP/2-only HTTPS client is taken for gRPC.

// serveClientPort serves the client listener l: gRPC and HTTP/1.1
// (through s.clientHTTP), with TLS if it is on.
func (s *Server) serveClientPort(l net.Listener) {
	if s.tls != nil && s.tls.clientServer != nil {
		s.serveClientTLS(l)
		return
	}
	m := cmux.New(l)
	// Bounds the wait for a new connection's first bytes; a matched
	// connection has no deadline left.
	m.SetReadTimeout(handshakeTimeout)
	grpcL := m.Match(cmux.HTTP2())
	s.clientHTTPLis = m.Match(cmux.HTTP1Fast())
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		_ = s.grpcSrv.Serve(grpcL)
	}()
	go func() {
		defer s.wg.Done()
		// Returns once l is closed (Stop closes the client listener).
		if err := m.Serve(); err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, cmux.ErrListenerClosed) && !errors.Is(err, cmux.ErrServerClosed) {
			s.log.Debug("client port mux", "err", err)
		}
	}()
}

// serveClientTLS does the TLS handshake of every connection to l and
// hands it to the gRPC server or, when the client chose HTTP/1.1 by ALPN,
// to the HTTP server.
func (s *Server) serveClientTLS(l net.Listener) {
	base := s.tls.clientServer
	cfg := base.Clone()
	cfg.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		c := base.Clone()
		c.NextProtos = []string{"h2"}
		if slices.Contains(hello.SupportedProtos, "http/1.1") {
			c.NextProtos = []string{"http/1.1"}
		}
		return c, nil
	}
	// Only a client that chose h2 is a gRPC client.
	isGRPC := func(tc *tls.Conn) bool { return tc.ConnectionState().NegotiatedProtocol == "h2" }
	grpcL := newConnQueue(l.Addr())
	httpL := newConnQueue(l.Addr())
	s.clientHTTPLis = httpL
	tl := tls.NewListener(l, cfg)
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		_ = s.grpcSrv.Serve(grpcL)
	}()
	go func() {
		defer s.wg.Done()
		defer grpcL.Close()
		defer httpL.Close()
		for {
			c, err := tl.Accept()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					s.log.Debug("client port accept", "err", err)
				}
				return
			}
			go func() {
				tc := c.(*tls.Conn)
				tc.SetDeadline(time.Now().Add(handshakeTimeout))
				if err := tc.Handshake(); err != nil {
					s.log.Debug("client port TLS handshake failed", "remote", c.RemoteAddr().String(), "err", err)
					c.Close()
					return
				}
				tc.SetDeadline(time.Time{})
				q := httpL
				if isGRPC(tc) {
					q = grpcL
				}
				if !q.put(tc) {
					c.Close()
				}
			}()
		}
	}()
}

// connQueue is a net.Listener whose connections another goroutine
// accepted and handed over.
type connQueue struct {
	addr   net.Addr
	ch     chan net.Conn
	done   chan struct{}
	closed sync.Once
}

func newConnQueue(addr net.Addr) *connQueue {
	return &connQueue{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

// put hands c to Accept; false once the queue is closed.
func (q *connQueue) put(c net.Conn) bool {
	select {
	case q.ch <- c:
		return true
	case <-q.done:
		return false
	}
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.ch:
		return c, nil
	case <-q.done:
		return nil, net.ErrClosed
	}
}

func (q *connQueue) Close() error {
	q.closed.Do(func() { close(q.done) })
	return nil
}

func (q *connQueue) Addr() net.Addr { return q.addr }

// startClientHTTP serves etcd's HTTP endpoints on the client port's
// HTTP/1.1 connections (serveClientPort), through the gateway's
// in-process connection, behind the same guard as the HTTP port.
func (s *Server) startClientHTTP() error {
	if s.clientHTTPLis == nil {
		return nil
	}
	conn, err := s.dialPipe(s.gwInproc)
	if err != nil {
		return err
	}
	s.clientGWConn = conn
	h, err := httpapi.New(httpNode{s}).EtcdClientHandler(conn, httpapi.EtcdClientOptions{
		Options:        s.httpOptions(),
		ServerVersion:  etcdapi.EtcdVersion,
		ClusterVersion: etcdapi.EtcdVersion,
		DKVVersion:     Version,
		Health:         s.etcdHealth,
	})
	if err != nil {
		return err
	}
	s.clientHTTPSrv = &http.Server{
		Handler:           s.httpGuard(h),
		ReadHeaderTimeout: handshakeTimeout, IdleTimeout: httpIdleTimeout,
		ErrorLog: s.httpErrorLog(),
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.clientHTTPSrv.Serve(s.clientHTTPLis); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, cmux.ErrListenerClosed) && !errors.Is(err, cmux.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			s.log.Error("client port http server", "err", err)
		}
	}()
	return nil
}

// etcdHealth is etcd's /health check: a leader, no alarm, and a
// linearizable read within ctx; "" when all hold, else etcd's reason.
func (s *Server) etcdHealth(ctx context.Context) string {
	if s.node.Status().Lead == 0 {
		return "RAFT NO LEADER"
	}
	if why := s.sm.Alarms().Describe(); why != "" {
		return "ALARM NOSPACE: " + why
	}
	if err := s.node.WaitLinearizable(ctx); err != nil {
		return "QGET ERROR: " + err.Error()
	}
	return ""
}
