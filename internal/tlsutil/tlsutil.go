package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
)

// ParseMinVersion maps a --tls-min-version value to a tls.Version
// constant: "" (the default, TLS 1.2), "1.2", "1.3", or with a TLS
// prefix ("TLS1.3", "tls1.2"). Anything else, older versions included, is
// an error naming what is accepted.
func ParseMinVersion(s string) (uint16, error) {
	v := strings.TrimPrefix(strings.ToLower(strings.TrimSpace(s)), "tls")
	v = strings.TrimPrefix(v, "v")
	switch v {
	case "", "1.2", "12":
		return tls.VersionTLS12, nil
	case "1.3", "13":
		return tls.VersionTLS13, nil
	}
	return 0, fmt.Errorf("%q is not an accepted TLS version: use 1.2 or 1.3 (TLS 1.0 and 1.1 are not supported)", s)
}

// CipherSuites are the TLS 1.2 suites DKV offers: ECDHE key exchange
// (forward secrecy) with an AEAD cipher, as Go itself prefers. TLS 1.3
// suites are not configurable in Go and are all secure.
var CipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// LoadPool reads a PEM file of CA certificates into a pool.
func LoadPool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return p, nil
}

// Reloader serves a certificate and key from files, and re-reads them
// when either file is replaced or its size or modification time changes
// (checked with one stat of each on every handshake: microseconds next to
// the handshake's milliseconds, and nothing per request) or when Reload is
// called (SIGHUP). A failed re-read keeps the last good pair and is
// reported by the next Reload or through OnError, so a half-written file
// never takes the port down.
type Reloader struct {
	certFile, keyFile string
	// OnError, when set, is told about a failed automatic re-read.
	OnError func(error)

	mu        sync.Mutex
	cert      *tls.Certificate
	certStamp stamp
	keyStamp  stamp
}

// stamp identifies a version of a file: the file (a rename replaces it)
// and its size and modification time (a rewrite in place).
type stamp struct {
	fi os.FileInfo
}

func (a stamp) same(b stamp) bool {
	return a.fi != nil && b.fi != nil && os.SameFile(a.fi, b.fi) &&
		a.fi.Size() == b.fi.Size() && a.fi.ModTime().Equal(b.fi.ModTime())
}

func stat(file string) (stamp, error) {
	fi, err := os.Stat(file)
	if err != nil {
		return stamp{}, err
	}
	return stamp{fi}, nil
}

// NewReloader loads certFile and keyFile, failing if they do not hold a
// matching pair.
func NewReloader(certFile, keyFile string) (*Reloader, error) {
	r := &Reloader{certFile: certFile, keyFile: keyFile}
	if err := r.Reload(); err != nil {
		return nil, err
	}
	return r, nil
}

// Reload re-reads the files now.
func (r *Reloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.load()
}

func (r *Reloader) load() error {
	cs, err1 := stat(r.certFile)
	ks, err2 := stat(r.keyFile)
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	c, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("certificate %s with key %s: %w", r.certFile, r.keyFile, err)
	}
	r.cert, r.certStamp, r.keyStamp = &c, cs, ks
	return nil
}

// Certificate is the current pair, re-read first if the files changed.
func (r *Reloader) Certificate() *tls.Certificate {
	r.mu.Lock()
	defer r.mu.Unlock()
	cs, err1 := stat(r.certFile)
	ks, err2 := stat(r.keyFile)
	if err1 == nil && err2 == nil && (!cs.same(r.certStamp) || !ks.same(r.keyStamp)) {
		if err := r.load(); err != nil {
			// Keep serving the last good pair; a cert written before
			// its key is retried on the next handshake.
			if r.OnError != nil {
				r.OnError(err)
			}
		}
	}
	return r.cert
}

// GetCertificate is for tls.Config.GetCertificate (a server's pair).
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.Certificate(), nil
}

// GetClientCertificate is for tls.Config.GetClientCertificate (the pair
// a client presents).
func (r *Reloader) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return r.Certificate(), nil
}

// Leaf is the parsed first certificate of the current pair.
func (r *Reloader) Leaf() (*x509.Certificate, error) {
	c := r.Certificate()
	if c.Leaf != nil {
		return c.Leaf, nil
	}
	return x509.ParseCertificate(c.Certificate[0])
}

// CommonName is the subject CN of a verified chain's leaf ("" if none).
func CommonName(state *tls.ConnectionState) (string, bool) {
	if state == nil || len(state.VerifiedChains) == 0 || len(state.VerifiedChains[0]) == 0 {
		return "", false
	}
	cn := state.VerifiedChains[0][0].Subject.CommonName
	return cn, cn != ""
}

// AllowedName reports whether the certificate's CN or one of its DNS or
// IP SANs is in allowed (an empty allowed admits every certificate).
func AllowedName(c *x509.Certificate, allowed []string) bool {
	if len(allowed) == 0 {
		return true
	}
	names := []string{c.Subject.CommonName}
	names = append(names, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	for _, n := range names {
		for _, a := range allowed {
			if n != "" && n == a {
				return true
			}
		}
	}
	return false
}
