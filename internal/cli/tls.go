package cli

import (
	"crypto/tls"
	"os"

	"github.com/dkv-io/dkv/internal/tlsutil"
	"github.com/spf13/pflag"
)

// tlsFlags are the global --cacert, --cert and --key.
type tlsFlags struct {
	cacert, cert, key string
	cfg               *tls.Config // built by load; nil: plaintext
}

func (t *tlsFlags) register(pf *pflag.FlagSet) {
	pf.StringVar(&t.cacert, "cacert", os.Getenv("DKV_CACERT"), "connect with TLS, trusting the CA certificates (PEM) in this file (env DKV_CACERT)")
	pf.StringVar(&t.cert, "cert", os.Getenv("DKV_CERT"), "client certificate (PEM) to present, for a cluster with --client-cert-auth; needs --key (env DKV_CERT)")
	pf.StringVar(&t.key, "key", os.Getenv("DKV_KEY"), "key (PEM) of --cert (env DKV_KEY)")
}

// load checks the flags and builds the client's TLS configuration: TLS
// is on with --cacert or --cert (a --cert alone trusts the system's
// roots).
func (t *tlsFlags) load() error {
	t.cfg = nil
	switch {
	case t.cert != "" && t.key == "":
		return Usagef("--key is required with --cert")
	case t.key != "" && t.cert == "":
		return Usagef("--cert is required with --key")
	case t.cacert == "" && t.cert == "":
		return nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.cacert != "" {
		pool, err := tlsutil.LoadPool(t.cacert)
		if err != nil {
			return Usagef("--cacert: %v", err)
		}
		cfg.RootCAs = pool
	}
	if t.cert != "" {
		pair, err := tls.LoadX509KeyPair(t.cert, t.key)
		if err != nil {
			return Usagef("--cert/--key: %v", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	t.cfg = cfg
	return nil
}

// ClientTLS is the client TLS configuration --cacert, --cert and --key
// with these values build (nil for plaintext), for a command that
// connects with files it made itself (dev-cluster --secure).
func ClientTLS(cacert, cert, key string) (*tls.Config, error) {
	t := tlsFlags{cacert: cacert, cert: cert, key: key}
	if err := t.load(); err != nil {
		return nil, err
	}
	return t.cfg, nil
}
