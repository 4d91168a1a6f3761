package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"github.com/dkv-io/dkv/server/httpapi"
	"net"
	"time"

	"github.com/dkv-io/dkv/internal/lograte"
	"github.com/dkv-io/dkv/internal/tlsutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/test/bufconn"
)

// TLSFiles turns TLS on for one port (Config.ClientTLS, Config.PeerTLS).
// The zero value is plaintext. The certificate and key files are re-read
// when they change and on Server.ReloadTLS, so they can be rotated
// without a restart; the CA file is read at start.
type TLSFiles struct {
	// CertFile and KeyFile are the PEM certificate (with its chain) and
	// key this member presents, as a server and, to other members, as a
	// client. A member's certificate therefore needs both the serverAuth
	// and clientAuth extended key usages (or none).
	CertFile, KeyFile string
	// TrustedCAFile is a PEM file of the CAs whose client certificates
	// are accepted (and, when this member dials another, whose server
	// certificates are trusted; empty: the system's roots).
	TrustedCAFile string
	// ClientCertAuth (client port) refuses clients without a
	// certificate signed by TrustedCAFile. Without it a client
	// certificate is verified if one is offered, and none is needed.
	// The peer port always requires a member certificate.
	ClientCertAuth bool
	// AllowedNames (peer port) admits only member certificates whose
	// CN or a DNS or IP SAN is in the list (empty: any certificate
	// signed by TrustedCAFile).
	AllowedNames []string
}

// Enabled reports whether the port is to use TLS.
func (t TLSFiles) Enabled() bool { return t.CertFile != "" || t.KeyFile != "" }

// validate reports a missing or contradictory setting, naming the flags
// of dkv serve (prefix "" for the client port, "peer-" for the peer
// port).
func (t TLSFiles) validate(prefix string) error {
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		return fmt.Errorf("--%skey-file is required with --%scert-file", prefix, prefix)
	case t.KeyFile != "" && t.CertFile == "":
		return fmt.Errorf("--%scert-file is required with --%skey-file", prefix, prefix)
	case !t.Enabled() && t.TrustedCAFile != "":
		return fmt.Errorf("--%strusted-ca-file needs --%scert-file and --%skey-file (TLS on that port)", prefix, prefix, prefix)
	case t.ClientCertAuth && t.TrustedCAFile == "":
		return fmt.Errorf("--%sclient-cert-auth needs --%strusted-ca-file, the CA that signs client certificates", prefix, prefix)
	case prefix == "peer-" && t.Enabled() && t.TrustedCAFile == "":
		return errors.New("--peer-trusted-ca-file is required with --peer-cert-file: members verify each other's certificates (mutual TLS)")
	case prefix == "peer-" && !t.Enabled() && len(t.AllowedNames) > 0:
		return errors.New("--peer-cert-allowed-cn needs --peer-cert-file, --peer-key-file and --peer-trusted-ca-file")
	}
	return nil
}

// tlsState is the TLS material of a started server; nil fields mean
// plaintext on that port.
type tlsState struct {
	minVersion uint16
	clientCert *tlsutil.Reloader
	peerCert   *tlsutil.Reloader
	// clientServer and peerServer are the listeners' configs.
	clientServer *tls.Config
	peerServer   *tls.Config
	// peerDial is what the transport dials other members' peer ports
	// with; memberDial what a member dials another member's client port
	// with (forwarding a membership call to the leader, joining).
	peerDial   *tls.Config
	memberDial *tls.Config
}

// setupTLS loads the certificates and builds the configs. Errors name
// the flag whose file is at fault.
func (s *Server) setupTLS() error {
	mv, err := tlsutil.ParseMinVersion(s.cfg.TLSMinVersion)
	if err != nil {
		return fmt.Errorf("--tls-min-version: %w", err)
	}
	st := &tlsState{minVersion: mv}
	s.tls = st
	logLimit := lograte.New(time.Minute)
	onErr := func(what string) func(error) {
		return func(err error) {
			if n, ok := logLimit.Allow(what); ok {
				s.log.Warn("re-reading a changed certificate failed; still using the previous one", "port", what, "err", err, "not_logged_since_last", n)
			}
		}
	}
	base := func() *tls.Config {
		return &tls.Config{MinVersion: mv, CipherSuites: tlsutil.CipherSuites}
	}
	if c := s.cfg.ClientTLS; c.Enabled() {
		if st.clientCert, err = tlsutil.NewReloader(c.CertFile, c.KeyFile); err != nil {
			return fmt.Errorf("--cert-file/--key-file: %w", err)
		}
		st.clientCert.OnError = onErr("client")
		srv := base()
		srv.GetCertificate = st.clientCert.GetCertificate
		dial := base()
		dial.GetClientCertificate = st.clientCert.GetClientCertificate
		if c.TrustedCAFile != "" {
			pool, err := tlsutil.LoadPool(c.TrustedCAFile)
			if err != nil {
				return fmt.Errorf("--trusted-ca-file: %w", err)
			}
			srv.ClientCAs = pool
			srv.ClientAuth = tls.VerifyClientCertIfGiven
			if c.ClientCertAuth {
				srv.ClientAuth = tls.RequireAndVerifyClientCert
			}
			dial.RootCAs = pool
		}
		st.clientServer, st.memberDial = srv, dial
	}
	if p := s.cfg.PeerTLS; p.Enabled() {
		if st.peerCert, err = tlsutil.NewReloader(p.CertFile, p.KeyFile); err != nil {
			return fmt.Errorf("--peer-cert-file/--peer-key-file: %w", err)
		}
		st.peerCert.OnError = onErr("peer")
		pool, err := tlsutil.LoadPool(p.TrustedCAFile)
		if err != nil {
			return fmt.Errorf("--peer-trusted-ca-file: %w", err)
		}
		allowed := append([]string(nil), p.AllowedNames...)
		verify := func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("dkv peer port: no member certificate")
			}
			if leaf := cs.PeerCertificates[0]; !tlsutil.AllowedName(leaf, allowed) {
				return fmt.Errorf("dkv peer port: certificate %q is not an allowed member (--peer-cert-allowed-cn)", leaf.Subject.CommonName)
			}
			return nil
		}
		srv := base()
		srv.GetCertificate = st.peerCert.GetCertificate
		srv.ClientCAs = pool
		srv.ClientAuth = tls.RequireAndVerifyClientCert
		srv.VerifyConnection = verify
		dial := base()
		dial.GetClientCertificate = st.peerCert.GetClientCertificate
		dial.RootCAs = pool
		dial.VerifyConnection = verify
		st.peerServer, st.peerDial = srv, dial
	}
	return nil
}

// ReloadTLS re-reads every certificate and key file now (dkv serve calls
// it on SIGHUP). Changed files are also picked up on their own at the
// next handshake; this makes a broken file visible at once. On error the
// previous certificates stay in use.
func (s *Server) ReloadTLS() error {
	if s.tls == nil {
		return nil
	}
	var errs []error
	if r := s.tls.clientCert; r != nil {
		if err := r.Reload(); err != nil {
			errs = append(errs, fmt.Errorf("client port: %w", err))
		}
	}
	if r := s.tls.peerCert; r != nil {
		if err := r.Reload(); err != nil {
			errs = append(errs, fmt.Errorf("peer port: %w", err))
		}
	}
	return errors.Join(errs...)
}

// clientServerOption is the client gRPC server's transport security:
// TLS on the network, none on the in-process pipes (the embedded client
// and the HTTP gateway, which has done its own TLS).
func (s *Server) clientServerOption() []grpc.ServerOption {
	if s.tls == nil || s.tls.clientServer == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(tlsExceptInProcess{credentials.NewTLS(s.tls.clientServer)})}
}

// tlsExceptInProcess is TLS for every connection but the in-process
// ones, which cannot come from the network.
type tlsExceptInProcess struct {
	credentials.TransportCredentials
}

func (c tlsExceptInProcess) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if _, ok := conn.(*inprocConn); ok {
		return insecure.NewCredentials().ServerHandshake(conn)
	}
	if tc, ok := conn.(*tls.Conn); ok {
		// The client port did the handshake to choose between gRPC and
		// HTTP by ALPN (serveClientTLS): take it as done here.
		return tc, credentials.TLSInfo{State: tc.ConnectionState(),
			CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
	}
	return c.TransportCredentials.ServerHandshake(conn)
}

func (c tlsExceptInProcess) Clone() credentials.TransportCredentials {
	return tlsExceptInProcess{c.TransportCredentials.Clone()}
}

// inprocListener marks the connections of an in-process pipe; those of
// the gateway's pipe also report gatewayAddr as their remote address.
type inprocListener struct {
	*bufconn.Listener
	gateway bool
}

func (l inprocListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &inprocConn{Conn: c, gateway: l.gateway}, nil
}

type inprocConn struct {
	net.Conn
	gateway bool
}

func (c *inprocConn) RemoteAddr() net.Addr {
	if c.gateway {
		return gatewayAddr{}
	}
	return c.Conn.RemoteAddr()
}

// memberDialCreds are the credentials a member dials another member's
// client port with: TLS with this member's client-port certificate when
// the client port has TLS (the cluster's members share one setup).
func (s *Server) memberDialCreds() grpc.DialOption {
	if s.tls == nil || s.tls.memberDial == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(s.tls.memberDial))
}

// cnKey carries the verified client certificate's CN of an HTTP request
// into the handlers it calls directly (httpapi's plain-value endpoint).
type cnKey struct{}

// gatewayCNHeader is the metadata the HTTP gateway passes the verified
// client certificate's CN in, to the in-process gRPC server. It is
// believed only on the gateway's own in-process connection (gatewayAddr).
const gatewayCNHeader = httpapi.CNMetadata

// gatewayAddr is the remote address of the gateway's in-process
// connections, which is how the gRPC server tells them from every other.
type gatewayAddr struct{}

func (gatewayAddr) Network() string { return "inprocess" }
func (gatewayAddr) String() string  { return "http-gateway" }

// peerCommonName is the CN of the client certificate verified on the
// connection a request came in on: a gRPC call on the client port, an
// HTTP request (through the gateway or directly), with ok false when the
// client presented none (or the port has no TLS). The auth work uses it
// as the user name with --client-cert-auth.
func peerCommonName(ctx context.Context) (string, bool) {
	if cn, ok := ctx.Value(cnKey{}).(string); ok {
		return cn, cn != ""
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "", false
	}
	if _, gw := p.Addr.(gatewayAddr); gw {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get(gatewayCNHeader); len(v) == 1 && v[0] != "" {
			return v[0], true
		}
		return "", false
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return "", false
	}
	return tlsutil.CommonName(&info.State)
}

// verifiedLeaf is the verified client certificate of a TLS connection.
func verifiedLeaf(cs *tls.ConnectionState) *x509.Certificate {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return nil
	}
	return cs.VerifiedChains[0][0]
}
