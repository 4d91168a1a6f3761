package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/api/dkv/v1/dkvgw"
	"github.com/dkv-io/dkv/internal/testutil"
	"github.com/dkv-io/dkv/internal/tlsutil"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

// testPKI is a CA with a server certificate for 127.0.0.1 written to dir.
type testPKI struct {
	ca                *tlsutil.CA
	dir               string
	certFile, keyFile string
	caFile            string
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	ca, err := tlsutil.NewCA("test ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := &testPKI{ca: ca, dir: dir, certFile: filepath.Join(dir, "server.crt"), keyFile: filepath.Join(dir, "server.key"), caFile: filepath.Join(dir, "ca.crt")}
	if err := ca.WriteCert(p.caFile); err != nil {
		t.Fatal(err)
	}
	p.issueServer(t)
	return p
}

// issueServer writes a fresh server certificate over the files and
// returns it.
func (p *testPKI) issueServer(t *testing.T) *x509.Certificate {
	t.Helper()
	c, err := p.ca.Issue("n1", []string{"127.0.0.1", "localhost"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFiles(p.certFile, p.keyFile); err != nil {
		t.Fatal(err)
	}
	return c.Cert
}

func (p *testPKI) client(t *testing.T, cn string) tls.Certificate {
	t.Helper()
	c, err := p.ca.Issue(cn, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := c.TLS()
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

func startTLSServer(t *testing.T, ct TLSFiles) *Server {
	t.Helper()
	cfg := quickConfig(t.TempDir())
	cfg.ClientTLS = ct
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	startInProcess(t, s)
	return s
}

// rangeWith dials addr with creds and makes one read.
func rangeWith(t *testing.T, addr string, creds credentials.TransportCredentials) error {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = dkvpb.NewKVClient(conn).Range(ctx, &dkvpb.RangeRequest{Key: []byte("k")})
	return err
}

func TestClientTLSRefusesPlaintext(t *testing.T) {
	p := newTestPKI(t)
	s := startTLSServer(t, TLSFiles{CertFile: p.certFile, KeyFile: p.keyFile})
	if err := rangeWith(t, s.ClientAddr(), insecure.NewCredentials()); status.Code(err) != codes.Unavailable {
		t.Errorf("plaintext gRPC client on a TLS port: %v; want Unavailable", err)
	}
	if err := rangeWith(t, s.ClientAddr(), credentials.NewTLS(&tls.Config{RootCAs: p.ca.Pool()})); err != nil {
		t.Errorf("TLS client trusting the CA: %v", err)
	}
	// A client that does not trust the CA refuses the server.
	if err := rangeWith(t, s.ClientAddr(), credentials.NewTLS(&tls.Config{})); status.Code(err) != codes.Unavailable {
		t.Errorf("TLS client without the CA: %v; want Unavailable", err)
	}
	// The HTTP port is HTTPS.
	resp, err := http.Get("http://" + s.HTTPAddr() + "/livez")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP on a TLS HTTP port answered 200")
		}
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.ca.Pool()}}}
	resp, err = hc.Get("https://" + s.HTTPAddr() + "/livez")
	if err != nil {
		t.Fatalf("HTTPS /livez: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("HTTPS /livez: %s", resp.Status)
	}
	// The embedded client's in-process pipe needs no TLS.
	conn, err := s.DialInProcess(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := dkvpb.NewKVClient(conn).Range(context.Background(), &dkvpb.RangeRequest{Key: []byte("k")}); err != nil {
		t.Errorf("in-process read on a TLS server: %v", err)
	}
}

func TestClientCertAuthRefusesUnsignedClients(t *testing.T) {
	p := newTestPKI(t)
	s := startTLSServer(t, TLSFiles{CertFile: p.certFile, KeyFile: p.keyFile, TrustedCAFile: p.caFile, ClientCertAuth: true})
	other := newTestPKI(t) // a CA the server does not trust
	for _, c := range []struct {
		what  string
		certs []tls.Certificate
		ok    bool
	}{
		{"no client certificate", nil, false},
		{"a certificate of another CA", []tls.Certificate{other.client(t, "alice")}, false},
		{"a certificate of the trusted CA", []tls.Certificate{p.client(t, "alice")}, true},
	} {
		err := rangeWith(t, s.ClientAddr(), credentials.NewTLS(&tls.Config{RootCAs: p.ca.Pool(), Certificates: c.certs}))
		if c.ok && err != nil {
			t.Errorf("%s: %v", c.what, err)
		}
		if !c.ok && status.Code(err) != codes.Unavailable {
			t.Errorf("%s: %v; want refused (Unavailable)", c.what, err)
		}
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.ca.Pool(), Certificates: c.certs}}}
		resp, err := hc.Get("https://" + s.HTTPAddr() + "/v1/keys/x")
		refused := err != nil
		if err == nil {
			refused = resp.StatusCode == http.StatusUnauthorized
			resp.Body.Close()
		}
		if c.ok == refused {
			t.Errorf("HTTPS API call with %s: err %v, refused=%v; want refused=%v", c.what, err, refused, !c.ok)
		}
	}
	// Probes and scrapers need no certificate: /livez,
	// /readyz and /metrics stay open.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.ca.Pool()}}}
	for _, path := range []string{"/livez", "/readyz", "/metrics"} {
		resp, err := hc.Get("https://" + s.HTTPAddr() + path)
		if err != nil {
			t.Fatalf("%s without a client certificate: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s without a client certificate: %s, want 200", path, resp.Status)
		}
	}
}

// TestRotatedCertificateUsedForNewConnections replaces the certificate
// files of a running server: the next handshake (client gRPC and HTTP)
// presents the new certificate, and so does one after ReloadTLS.
func TestRotatedCertificateUsedForNewConnections(t *testing.T) {
	p := newTestPKI(t)
	s := startTLSServer(t, TLSFiles{CertFile: p.certFile, KeyFile: p.keyFile})
	served := func(addr string) string {
		t.Helper()
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: p.ca.Pool(), ServerName: "127.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	first := served(s.ClientAddr())
	for i := range 2 {
		next := p.issueServer(t).SerialNumber.String()
		if next == first {
			t.Fatal("two certificates with one serial")
		}
		if i == 1 {
			if err := s.ReloadTLS(); err != nil { // SIGHUP
				t.Fatal(err)
			}
		}
		for _, addr := range []string{s.ClientAddr(), s.HTTPAddr()} {
			if got := served(addr); got != next {
				t.Errorf("round %d: %s serves certificate %s after the files were replaced, want the new %s", i, addr, got, next)
			}
		}
		first = next
	}
	// A broken file keeps the last good certificate in use.
	if err := os.WriteFile(p.certFile, []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.ReloadTLS(); err == nil {
		t.Error("ReloadTLS of a broken certificate file: no error")
	}
	if got := served(s.ClientAddr()); got != first {
		t.Errorf("with a broken certificate file the server serves %s, want the last good %s", got, first)
	}
}

func TestTLSConfigValidation(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{ClientTLS: TLSFiles{CertFile: "c"}}, "--key-file is required with --cert-file"},
		{Config{ClientTLS: TLSFiles{KeyFile: "k"}}, "--cert-file is required with --key-file"},
		{Config{ClientTLS: TLSFiles{CertFile: "c", KeyFile: "k", ClientCertAuth: true}}, "--client-cert-auth needs --trusted-ca-file"},
		{Config{ClientTLS: TLSFiles{TrustedCAFile: "ca"}}, "--trusted-ca-file needs --cert-file"},
		{Config{PeerTLS: TLSFiles{CertFile: "c"}}, "--peer-key-file is required with --peer-cert-file"},
		{Config{PeerTLS: TLSFiles{CertFile: "c", KeyFile: "k"}}, "--peer-trusted-ca-file is required"},
		{Config{PeerTLS: TLSFiles{AllowedNames: []string{"n1"}}}, "--peer-cert-allowed-cn needs --peer-cert-file"},
		{Config{TLSMinVersion: "1.1"}, "--tls-min-version"},
		{Config{TLSMinVersion: "ssl3"}, "use 1.2 or 1.3"},
	} {
		c.cfg.EnsureDefaults()
		err := c.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want an error naming %q", c.cfg.ClientTLS, err, c.want)
		}
	}
	cfg := Config{TLSMinVersion: "1.3"}
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		t.Errorf("--tls-min-version 1.3: %v", err)
	}
	// A missing file is reported at start, naming its flag.
	cfg = quickConfig(t.TempDir())
	cfg.ClientTLS = TLSFiles{CertFile: filepath.Join(t.TempDir(), "missing.crt"), KeyFile: "missing.key"}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "--cert-file") {
		t.Errorf("start with a missing certificate file: %v; want an error naming --cert-file", err)
	}
}

func TestTLSMinVersionRefusesOlderClients(t *testing.T) {
	p := newTestPKI(t)
	cfg := quickConfig(t.TempDir())
	cfg.ClientTLS = TLSFiles{CertFile: p.certFile, KeyFile: p.keyFile}
	cfg.TLSMinVersion = "1.3"
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if _, err := tls.Dial("tcp", s.ClientAddr(), &tls.Config{RootCAs: p.ca.Pool(), MaxVersion: tls.VersionTLS12}); err == nil {
		t.Error("a TLS 1.2 client was accepted with --tls-min-version 1.3")
	}
	c, err := tls.Dial("tcp", s.ClientAddr(), &tls.Config{RootCAs: p.ca.Pool()})
	if err != nil {
		t.Fatalf("TLS 1.3 client: %v", err)
	}
	c.Close()
}

// TestPeerCommonName: the CN comes from a verified certificate on the
// connection, or (only on the gateway's own pipe) from the gateway's
// metadata, which no HTTP header can set.
func TestPeerCommonName(t *testing.T) {
	leaf := &x509.Certificate{}
	leaf.Subject.CommonName = "alice"
	tlsCtx := peer.NewContext(context.Background(), &peer.Peer{
		Addr:     &net.TCPAddr{},
		AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leaf}}}},
	})
	if cn, ok := peerCommonName(tlsCtx); !ok || cn != "alice" {
		t.Errorf("verified TLS peer: %q %v", cn, ok)
	}
	unverified := peer.NewContext(context.Background(), &peer.Peer{
		Addr: &net.TCPAddr{}, AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}},
	})
	if cn, ok := peerCommonName(unverified); ok {
		t.Errorf("unverified certificate gave CN %q", cn)
	}
	spoof := metadata.NewIncomingContext(peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{}}), metadata.Pairs(gatewayCNHeader, "root"))
	if cn, ok := peerCommonName(spoof); ok {
		t.Errorf("metadata on a network connection gave CN %q", cn)
	}
	gw := metadata.NewIncomingContext(peer.NewContext(context.Background(), &peer.Peer{Addr: gatewayAddr{}}), metadata.Pairs(gatewayCNHeader, "bob"))
	if cn, ok := peerCommonName(gw); !ok || cn != "bob" {
		t.Errorf("gateway pipe: %q %v", cn, ok)
	}
	for _, h := range []string{"Grpc-Metadata-" + gatewayCNHeader, "grpc-metadata-DKV-GATEWAY-CLIENT-CN"} {
		if k, ok := gatewayHeaderMatcher(h); ok {
			t.Errorf("HTTP header %s is passed to the gRPC handler as %q", h, k)
		}
	}
	if _, ok := gatewayHeaderMatcher("Authorization"); !ok {
		t.Error("the gateway no longer passes the Authorization header")
	}
}

// cnKV records what peerCommonName says in each Range.
type cnKV struct {
	dkvpb.UnimplementedKVServer
	got chan string
}

func (k *cnKV) Range(ctx context.Context, _ *dkvpb.RangeRequest) (*dkvpb.RangeResponse, error) {
	cn, ok := peerCommonName(ctx)
	if !ok {
		cn = "(none)"
	}
	k.got <- cn
	return &dkvpb.RangeResponse{}, nil
}

// TestPeerCommonNameEndToEnd runs the real pieces — the TLS credentials
// that spare in-process pipes, the gateway's pipe and its CN options — in
// a gRPC server of its own whose Range reports peerCommonName: the CN of
// a verified client certificate over gRPC and over HTTPS through the
// gateway, and none for a client without one, whatever metadata or
// headers it sends.
func TestPeerCommonNameEndToEnd(t *testing.T) {
	p := newTestPKI(t)
	srvPair, err := tls.LoadX509KeyPair(p.certFile, p.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	tcfg := &tls.Config{Certificates: []tls.Certificate{srvPair}, ClientCAs: p.ca.Pool(), ClientAuth: tls.VerifyClientCertIfGiven}
	kv := &cnKV{got: make(chan string, 1)}
	gs := grpc.NewServer(grpc.Creds(tlsExceptInProcess{credentials.NewTLS(tcfg)}))
	dkvpb.RegisterKVServer(gs, kv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pipe, gwPipe := bufconn.Listen(1<<20), bufconn.Listen(1<<20)
	go gs.Serve(lis)
	go gs.Serve(inprocListener{Listener: pipe})
	go gs.Serve(inprocListener{Listener: gwPipe, gateway: true})
	defer gs.Stop()
	s := &Server{cfg: Config{MaxValueBytes: 1 << 20}}

	call := func(conn *grpc.ClientConn, md metadata.MD) string {
		t.Helper()
		defer conn.Close()
		ctx := metadata.NewOutgoingContext(context.Background(), md)
		if _, err := dkvpb.NewKVClient(conn).Range(ctx, &dkvpb.RangeRequest{Key: []byte("k")}); err != nil {
			t.Fatal(err)
		}
		return <-kv.got
	}
	tlsConn := func(certs []tls.Certificate) *grpc.ClientConn {
		c, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: p.ca.Pool(), ServerName: "127.0.0.1", Certificates: certs})))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	pipeConn := func(l *bufconn.Listener) *grpc.ClientConn {
		c, err := s.dialPipe(l)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	spoof := metadata.Pairs(gatewayCNHeader, "root")
	alice := []tls.Certificate{p.client(t, "alice")}
	for what, c := range map[string]struct {
		got, want string
	}{
		"gRPC with alice's certificate":       {call(tlsConn(alice), nil), "alice"},
		"gRPC without a certificate, spoofed": {call(tlsConn(nil), spoof), "(none)"},
		"in-process pipe, spoofed":            {call(pipeConn(pipe), spoof), "(none)"},
		"gateway pipe":                        {call(pipeConn(gwPipe), metadata.Pairs(gatewayCNHeader, "bob")), "bob"},
	} {
		if c.got != c.want {
			t.Errorf("%s: peerCommonName %q, want %q", what, c.got, c.want)
		}
	}

	// HTTPS through the gateway, as startHTTP builds it.
	gwConn := pipeConn(gwPipe)
	defer gwConn.Close()
	mux := runtime.NewServeMux(gatewayCNOptions()...)
	if err := dkvgw.RegisterKVHandler(context.Background(), mux, gwConn); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(withClientCN(mux, false))
	hs.TLS = tcfg
	hs.StartTLS()
	defer hs.Close()
	for _, c := range []struct {
		what  string
		certs []tls.Certificate
		want  string
	}{
		{"HTTPS with alice's certificate", alice, "alice"},
		{"HTTPS without a certificate, spoofed header", nil, "(none)"},
	} {
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.ca.Pool(), Certificates: c.certs}}}
		req, _ := http.NewRequest("POST", hs.URL+"/v1/kv/range", strings.NewReader(`{"key":"aw=="}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Grpc-Metadata-"+gatewayCNHeader, "root")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s", c.what, resp.Status)
		}
		if got := <-kv.got; got != c.want {
			t.Errorf("%s: peerCommonName %q, want %q", c.what, got, c.want)
		}
	}
}

// A failed TLS handshake on the HTTPS port is logged as the node's other
// lines are (structured, with the member's name), not in the standard
// library log's own format.
func TestTLSHandshakeErrorsInNodeLog(t *testing.T) {
	p := newTestPKI(t)
	var logs testutil.LockedBuffer
	cfg := quickConfig(t.TempDir())
	cfg.Name = "n1"
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil)).With("member", "n1")
	cfg.ClientTLS = TLSFiles{CertFile: p.certFile, KeyFile: p.keyFile}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	startInProcess(t, s)
	c, err := net.Dial("tcp", s.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte{0x16, 0x03, 0x01, 0x00, 0x05, 'h', 'e', 'l', 'l', 'o'}) // a broken ClientHello
	io.Copy(io.Discard, c)                                                 // until the server hangs up
	c.Close()
	var line string
	testutil.Eventually(t, 10*time.Second, "the handshake error logged", func() bool {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "TLS handshake error") {
				line = l
				return true
			}
		}
		return false
	})
	if !strings.HasPrefix(line, "time=") || !strings.Contains(line, "level=WARN") || !strings.Contains(line, "member=n1") {
		t.Errorf("handshake error not in the node's log format: %q", line)
	}
}

// With TLS on, the client address serves etcd's HTTP endpoints over
// HTTPS as well as gRPC, as etcd's client URL does: a client that offers
// HTTP/1.1 by ALPN (curl, browsers, Python) gets it, a gRPC client (only
// h2) gets gRPC; with --client-cert-auth both need a certificate, and a
// client certificate still names the gRPC caller.
func TestTLSClientPortServesHTTPS(t *testing.T) {
	p := newTestPKI(t)
	s := startTLSServer(t, TLSFiles{CertFile: p.certFile, KeyFile: p.keyFile, TrustedCAFile: p.caFile, ClientCertAuth: true})
	httpsClient := func(certs []tls.Certificate, h2 bool) *http.Client {
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: p.ca.Pool(), Certificates: certs},
			ForceAttemptHTTP2: h2, // offers h2 and http/1.1, as curl does
		}}
	}
	alice := []tls.Certificate{p.client(t, "alice")}
	for _, h2 := range []bool{false, true} {
		hc := httpsClient(alice, h2)
		resp, err := hc.Get("https://" + s.ClientAddr() + "/version")
		if err != nil {
			t.Fatalf("GET /version over HTTPS on the client port (h2 offered: %v): %v", h2, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"etcdserver"`) || resp.Proto != "HTTP/1.1" {
			t.Fatalf("GET /version (h2 offered: %v) = %s %s %s, want 200 HTTP/1.1 with etcd's JSON", h2, resp.Proto, resp.Status, b)
		}
		// "Zm9v" is "foo", "YmFy" "bar": the gateway's base64 bytes.
		resp, err = hc.Post("https://"+s.ClientAddr()+"/v3/kv/put", "application/json", strings.NewReader(`{"key":"Zm9v","value":"YmFy"}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("POST /v3/kv/put over HTTPS = %s %s", resp.Status, b)
		}
	}
	// gRPC on the same address, with the same handshake rules.
	conn, err := grpc.NewClient("passthrough:///"+s.ClientAddr(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: p.ca.Pool(), Certificates: alice})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := dkvpb.NewKVClient(conn).Range(ctx, &dkvpb.RangeRequest{Key: []byte("foo")})
	if err != nil || len(r.GetKvs()) != 1 || string(r.GetKvs()[0].GetValue()) != "bar" {
		t.Fatalf("gRPC read over TLS of what HTTPS wrote: %v %v", r, err)
	}
	if err := rangeWith(t, s.ClientAddr(), credentials.NewTLS(&tls.Config{RootCAs: p.ca.Pool()})); status.Code(err) != codes.Unavailable {
		t.Errorf("gRPC without a client certificate: %v, want refused", err)
	}
	if resp, err := httpsClient(nil, false).Get("https://" + s.ClientAddr() + "/version"); err == nil {
		resp.Body.Close()
		t.Errorf("HTTPS without a client certificate: %s, want the handshake refused", resp.Status)
	}
}
