package tlsutil

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseMinVersion(t *testing.T) {
	for in, want := range map[string]uint16{"": tls.VersionTLS12, "1.2": tls.VersionTLS12, "TLS1.2": tls.VersionTLS12, "1.3": tls.VersionTLS13, "tls1.3": tls.VersionTLS13} {
		if got, err := ParseMinVersion(in); err != nil || got != want {
			t.Errorf("ParseMinVersion(%q) = %x, %v; want %x", in, got, err, want)
		}
	}
	for _, in := range []string{"1.0", "1.1", "1.4", "ssl3", "x"} {
		if _, err := ParseMinVersion(in); err == nil || !strings.Contains(err.Error(), "use 1.2 or 1.3") {
			t.Errorf("ParseMinVersion(%q): %v; want an error naming 1.2 and 1.3", in, err)
		}
	}
}

func TestAllowedName(t *testing.T) {
	ca, err := NewCA("ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ca.Issue("n1", []string{"n1.example", "10.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, ok := range [][]string{nil, {"n1"}, {"x", "n1.example"}, {"10.0.0.1"}} {
		if !AllowedName(c.Cert, ok) {
			t.Errorf("n1 (SANs n1.example, 10.0.0.1) not allowed by %q", ok)
		}
	}
	for _, no := range [][]string{{"n2"}, {"n1.example.org"}, {""}} {
		if AllowedName(c.Cert, no) {
			t.Errorf("n1 allowed by %q", no)
		}
	}
}

// A Reloader serves the pair on disk: replaced by a rename, rewritten in
// place, or broken (the last good pair stays, the error is reported).
func TestReloader(t *testing.T) {
	ca, err := NewCA("ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cf, kf := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	issue := func() *Issued {
		c, err := ca.Issue("n1", nil, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a := issue()
	if err := a.WriteFiles(cf, kf); err != nil {
		t.Fatal(err)
	}
	r, err := NewReloader(cf, kf)
	if err != nil {
		t.Fatal(err)
	}
	var reported []error
	r.OnError = func(err error) { reported = append(reported, err) }
	serial := func() string {
		l, err := r.Leaf()
		if err != nil {
			t.Fatal(err)
		}
		return l.SerialNumber.String()
	}
	if serial() != a.Cert.SerialNumber.String() {
		t.Fatal("not serving the first pair")
	}
	b := issue()
	if err := b.WriteFiles(cf, kf); err != nil { // renamed into place
		t.Fatal(err)
	}
	if serial() != b.Cert.SerialNumber.String() {
		t.Error("a pair renamed into place is not served")
	}
	c := issue()
	if err := os.WriteFile(kf, c.KeyPEM, 0o600); err != nil { // rewritten in place
		t.Fatal(err)
	}
	if err := os.WriteFile(cf, c.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if serial() != c.Cert.SerialNumber.String() {
		t.Error("a pair rewritten in place is not served")
	}
	if err := os.WriteFile(cf, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if serial() != c.Cert.SerialNumber.String() {
		t.Error("a broken certificate file replaced the last good pair")
	}
	if len(reported) == 0 {
		t.Error("a broken certificate file was not reported")
	}
	if err := r.Reload(); err == nil {
		t.Error("Reload of a broken file: no error")
	}
	if _, err := NewReloader(filepath.Join(dir, "missing"), kf); err == nil {
		t.Error("NewReloader of a missing file: no error")
	}
}
