package server

import (
	"context"
	"errors"
	"net"
	"net/http"

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
// With TLS on the client port it is gRPC only: gRPC does the handshake
// itself, before any byte could be looked at. etcd's HTTP endpoints are
// then on the HTTP port, over HTTPS (docs/etcd-compat.md).

// serveClientPort serves the client listener l: gRPC, and without TLS
// also HTTP/1.1 through s.clientHTTP.
func (s *Server) serveClientPort(l net.Listener) {
	if s.tls != nil && s.tls.clientServer != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			_ = s.grpcSrv.Serve(l)
		}()
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
