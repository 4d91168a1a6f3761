package cli_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/dkv-io/dkv/internal/cli/clitest"
	"github.com/dkv-io/dkv/internal/tlsutil"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
)

// --cacert without --cert against a cluster that wants client
// certificates says so and names the flags, whatever gRPC happened to
// see first (a broken pipe or the server's alert).
func TestCLINamesMissingClientCertificate(t *testing.T) {
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
	n := &clitest.Node{T: t, Addr: srv.ClientAddr()}
	for range 3 {
		n.Fails(7, "Error: Unavailable: this cluster requires a client certificate (--cert/--key)\n", "--cacert", caFile, "get", "k")
	}
}
