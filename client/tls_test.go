package client_test

import (
	"context"
	"crypto/tls"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/internal/testutil"
	"github.com/dkv-io/dkv/internal/tlsutil"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
)

// Config.TLS connects to a server whose client port has TLS (the member's
// certificate is checked against the endpoint's host); without it, or
// without the client certificate the server requires, New fails.
func TestClientTLS(t *testing.T) {
	ca, err := tlsutil.NewCA("test ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	caFile, certFile, keyFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "s.crt"), filepath.Join(dir, "s.key")
	srvCert, err := ca.Issue("n1", []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.WriteCert(caFile); err != nil {
		t.Fatal(err)
	}
	if err := srvCert.WriteFiles(certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	srv := servertest.Start(t, servertest.WithClientPort(), servertest.WithConfig(func(c *server.Config) {
		c.ClientTLS = server.TLSFiles{CertFile: certFile, KeyFile: keyFile, TrustedCAFile: caFile, ClientCertAuth: true}
	})).Srv
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cc, err := ca.Issue("app", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := cc.TLS()
	if err != nil {
		t.Fatal(err)
	}
	connect := func(cfg *tls.Config) (*client.Client, error) {
		return client.New(ctx, client.Config{Endpoints: []string{srv.ClientAddr()}, TLS: cfg, FailFast: true, DialTimeout: 5 * time.Second, AutoSyncInterval: -1})
	}
	c, err := connect(&tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{pair}})
	if err != nil {
		t.Fatalf("New with TLS: %v", err)
	}
	defer c.Close()
	if _, err := c.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatalf("put over TLS: %v", err)
	}
	if kv, err := c.Get(ctx, "k"); err != nil || string(kv.Value) != "v" {
		t.Fatalf("get over TLS: %v %v", kv, err)
	}
	for what, cfg := range map[string]*tls.Config{
		"plaintext":             nil,
		"no client certificate": {RootCAs: ca.Pool()},
	} {
		if c, err := connect(cfg); err == nil {
			c.Close()
			t.Errorf("New %s against a TLS port with client cert auth: connected", what)
		}
	}
	// Without a certificate, gRPC's own error is "write: broken pipe" or
	// "certificate required", depending on timing; the client says
	// which it is, every time.
	for i := 0; i < 5; i++ {
		_, err := connect(&tls.Config{RootCAs: ca.Pool()})
		if !errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), "the cluster requires a client certificate, and none was given") {
			t.Fatalf("New without the client certificate the server requires: %v; want Unavailable saying a certificate is required", err)
		}
	}
	// A server that wants none is not said to want one when it is down.
	down := testutil.FreeAddr(t)
	_, err = client.New(ctx, client.Config{Endpoints: []string{down}, TLS: &tls.Config{RootCAs: ca.Pool()}, FailFast: true, DialTimeout: 5 * time.Second, AutoSyncInterval: -1})
	if err == nil || strings.Contains(err.Error(), "client certificate") {
		t.Errorf("New against a closed port: %v; want an error not about certificates", err)
	}
}
