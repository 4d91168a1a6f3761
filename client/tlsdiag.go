package client

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"time"
)

// errCertRequired is the start of the message of a connection failure
// that a probe found to be a missing client certificate.
const errCertRequired = "the cluster requires a client certificate, and none was given"

// wantsClientCert probes the endpoints, with TLS as cfg has it, for one
// that refuses a client without a certificate. It is asked only after
// every endpoint failed, and only when cfg has no certificate: gRPC then
// reports "write: broken pipe" or "certificate required" depending on
// timing, and neither says what to do. Under TLS 1.3 the server checks
// the client's certificate after the handshake, so the probe reads for
// the server's alert.
func wantsClientCert(ctx context.Context, cfg *tls.Config, endpoints []string) bool {
	if cfg == nil || len(cfg.Certificates) > 0 || cfg.GetClientCertificate != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for _, ep := range endpoints {
		if ctx.Err() != nil {
			return false
		}
		c := cfg.Clone()
		if c.ServerName == "" {
			if host, _, err := net.SplitHostPort(ep); err == nil {
				c.ServerName = host
			}
		}
		c.NextProtos = []string{"h2"}
		d := tls.Dialer{Config: c}
		conn, err := d.DialContext(ctx, "tcp", ep)
		if err == nil {
			deadline, _ := ctx.Deadline()
			conn.SetReadDeadline(deadline)
			_, err = conn.Read(make([]byte, 1))
			conn.Close()
		}
		if err != nil && (strings.Contains(err.Error(), "tls: certificate required") || strings.Contains(err.Error(), "tls: bad certificate")) {
			return true
		}
	}
	return false
}
