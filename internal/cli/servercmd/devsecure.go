package servercmd

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/internal/cli"
	"github.com/dkv-io/dkv/internal/tlsutil"
)

// devPKI is what dev-cluster --secure keeps in DATA-DIR/tls: a throwaway
// CA, one certificate per member (for its client and peer ports, both
// server and client use, SANs the host, localhost and 127.0.0.1) and a
// client certificate named root. All absolute paths.
type devPKI struct {
	dir                   string
	caFile                string
	clientCert, clientKey string
	memberCert, memberKey map[string]string
	rootPasswordFile      string
}

// devCertValidity: long enough to never matter for a dev cluster.
const devCertValidity = 10 * 365 * 24 * time.Hour

// makeDevPKI writes the CA and certificates into dataDir/tls, unless a
// complete set is already there (so a restarted dev cluster keeps the
// files a user's shell points at), and a random root password into
// dataDir/root-password (mode 0600) unless one exists.
func makeDevPKI(dataDir, host string, names []string) (*devPKI, error) {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, err
	}
	p := &devPKI{
		dir: filepath.Join(abs, "tls"), memberCert: map[string]string{}, memberKey: map[string]string{},
		rootPasswordFile: filepath.Join(abs, "root-password"),
	}
	p.caFile = filepath.Join(p.dir, "ca.crt")
	p.clientCert, p.clientKey = filepath.Join(p.dir, "client-root.crt"), filepath.Join(p.dir, "client-root.key")
	files := []string{p.caFile, p.clientCert, p.clientKey}
	for _, n := range names {
		p.memberCert[n], p.memberKey[n] = filepath.Join(p.dir, n+".crt"), filepath.Join(p.dir, n+".key")
		files = append(files, p.memberCert[n], p.memberKey[n])
	}
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return nil, err
	}
	complete := true
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			complete = false
		}
	}
	if !complete {
		ca, err := tlsutil.NewCA("dkv dev-cluster CA", devCertValidity)
		if err != nil {
			return nil, err
		}
		if err := ca.WriteCert(p.caFile); err != nil {
			return nil, err
		}
		hosts := []string{host, "localhost", "127.0.0.1"}
		for _, n := range names {
			c, err := ca.Issue(n, hosts, devCertValidity)
			if err != nil {
				return nil, err
			}
			if err := c.WriteFiles(p.memberCert[n], p.memberKey[n]); err != nil {
				return nil, err
			}
		}
		c, err := ca.Issue("root", nil, devCertValidity)
		if err != nil {
			return nil, err
		}
		if err := c.WriteFiles(p.clientCert, p.clientKey); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat(p.rootPasswordFile); errors.Is(err, os.ErrNotExist) {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p.rootPasswordFile, []byte(hex.EncodeToString(b)+"\n"), 0o600); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	}
	return p, nil
}

// serveArgs are the TLS flags of member name's dkv serve: TLS with client
// certificates required on the client port, mutual TLS on the peer port
// admitting the members' names only.
func (p *devPKI) serveArgs(name string, names []string) []string {
	return []string{
		"--cert-file", p.memberCert[name], "--key-file", p.memberKey[name],
		"--trusted-ca-file", p.caFile, "--client-cert-auth",
		"--peer-cert-file", p.memberCert[name], "--peer-key-file", p.memberKey[name],
		"--peer-trusted-ca-file", p.caFile, "--peer-cert-allowed-cn", strings.Join(names, ","),
	}
}

// clientFlags are the dkv flags that connect to the secured cluster.
func (p *devPKI) clientFlags() string {
	return fmt.Sprintf("--cacert %s --cert %s --key %s", p.caFile, p.clientCert, p.clientKey)
}

// clientTLS is the client configuration clientFlags describe.
func (p *devPKI) clientTLS() (*tls.Config, error) {
	return cli.ClientTLS(p.caFile, p.clientCert, p.clientKey)
}

// awaitSecureCluster waits (up to a minute, or until ctx ends) for the
// secured cluster to serve a linearizable read, then runs the auth
// bootstrap hook.
func awaitSecureCluster(ctx context.Context, p *devPKI, eps []string) error {
	cfg, err := p.clientTLS()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		err := func() error {
			c, err := client.New(ctx, client.Config{Endpoints: eps, TLS: cfg, AutoSyncInterval: -1, DialTimeout: 2 * time.Second})
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Get(ctx, "dkv/dev-cluster/ready")
			if errors.Is(err, client.ErrNotFound) {
				err = nil
			}
			return err
		}()
		if err == nil {
			return secureBootstrapAuth(ctx, eps, cfg, p.rootPasswordFile)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the secured cluster did not answer: %w", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// secureBootstrapAuth is run once a dev-cluster --secure is up: it
// creates the user root with the password in rootPasswordFile, grants it
// the built-in root role and enables auth, so the dev cluster starts
// secured end to end. A cluster whose auth is already on (a restarted dev
// cluster) is left as it is.
func secureBootstrapAuth(ctx context.Context, endpoints []string, tlsCfg *tls.Config, rootPasswordFile string) error {
	b, err := os.ReadFile(rootPasswordFile)
	if err != nil {
		return err
	}
	pw := strings.TrimSpace(string(b))
	c, err := client.New(ctx, client.Config{Endpoints: endpoints, TLS: tlsCfg, AutoSyncInterval: -1, Username: "root", Password: pw})
	if err != nil {
		return err
	}
	defer c.Close()
	st, err := c.AuthStatus(ctx)
	if err != nil {
		return fmt.Errorf("auth status: %w", err)
	}
	if st.GetEnabled() {
		return nil
	}
	if err := c.UserAdd(ctx, "root", pw); err != nil && !errors.Is(err, client.ErrConflict) {
		return fmt.Errorf("adding user root: %w", err)
	}
	if err := c.UserGrantRole(ctx, "root", "root"); err != nil {
		return fmt.Errorf("granting role root to user root: %w", err)
	}
	if err := c.AuthEnable(ctx); err != nil {
		return fmt.Errorf("enabling auth: %w", err)
	}
	return nil
}
