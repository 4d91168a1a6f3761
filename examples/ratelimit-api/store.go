package main

// The store this example runs against: an embedded single-node store in a
// temporary directory by default, or a cluster with --endpoints (and the
// same TLS and auth flags as the dkv CLI). Examples 6 to 9 each carry a
// copy of this file, so each folder stands alone; it is the part you
// would replace with your service's own configuration.

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/embedded"
)

type storeFlags struct {
	endpoints, cacert, cert, key, user string
}

func (f *storeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.endpoints, "endpoints", os.Getenv("DKV_ENDPOINTS"), "comma-separated gRPC endpoints of a cluster (env DKV_ENDPOINTS); empty: an embedded store in a temporary directory")
	fs.StringVar(&f.cacert, "cacert", os.Getenv("DKV_CACERT"), "connect with TLS, trusting the CA certificates (PEM) in this file (env DKV_CACERT)")
	fs.StringVar(&f.cert, "cert", os.Getenv("DKV_CERT"), "client certificate (PEM), with --key (env DKV_CERT)")
	fs.StringVar(&f.key, "key", os.Getenv("DKV_KEY"), "key (PEM) of --cert (env DKV_KEY)")
	fs.StringVar(&f.user, "user", os.Getenv("DKV_USER"), "authenticate as NAME[:PASSWORD] (env DKV_USER; the password may come from DKV_PASSWORD)")
}

// open connects to the store; closing the client stops an embedded store,
// and cleanup then removes its directory. where says what it connected to.
func (f *storeFlags) open(ctx context.Context) (c *client.Client, where string, cleanup func(), err error) {
	if f.endpoints == "" {
		dir, err := os.MkdirTemp("", "dkv-example-")
		if err != nil {
			return nil, "", nil, err
		}
		c, err := embedded.Open(ctx, dir)
		if err != nil {
			os.RemoveAll(dir)
			return nil, "", nil, err
		}
		return c, "an embedded store in " + dir, func() { c.Close(); os.RemoveAll(dir) }, nil
	}
	cfg := client.Config{Endpoints: strings.Split(f.endpoints, ",")}
	if f.cert != "" || f.key != "" || f.cacert != "" {
		if (f.cert == "") != (f.key == "") {
			return nil, "", nil, errors.New("--cert and --key go together")
		}
		t := &tls.Config{MinVersion: tls.VersionTLS12}
		if f.cacert != "" {
			pem, err := os.ReadFile(f.cacert)
			if err != nil {
				return nil, "", nil, fmt.Errorf("--cacert: %w", err)
			}
			t.RootCAs = x509.NewCertPool()
			if !t.RootCAs.AppendCertsFromPEM(pem) {
				return nil, "", nil, fmt.Errorf("--cacert %s: no PEM certificate in it", f.cacert)
			}
		}
		if f.cert != "" {
			pair, err := tls.LoadX509KeyPair(f.cert, f.key)
			if err != nil {
				return nil, "", nil, fmt.Errorf("--cert/--key: %w", err)
			}
			t.Certificates = []tls.Certificate{pair}
		}
		cfg.TLS = t
	}
	if f.user != "" {
		name, pw, ok := strings.Cut(f.user, ":")
		if !ok {
			pw = os.Getenv("DKV_PASSWORD")
		}
		cfg.Username, cfg.Password = name, pw
	}
	c, err = client.New(ctx, cfg)
	if err != nil {
		return nil, "", nil, err
	}
	return c, "the cluster at " + f.endpoints, func() { c.Close() }, nil
}

// runID names this run's keys, so runs against a shared cluster do not
// see each other's data.
func runID() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}
