package browser

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// selfSigned writes a self-signed certificate for localhost and every
// 127.0.0.x, and its key. The members' addresses are random in
// 127.0.0.0/8, so the Go side checks the name localhost (httpsClient).
func selfSigned(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "dkv browser test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IsCA:        true, BasicConstraintsValid: true, DNSNames: []string{"localhost"},
	}
	for i := 1; i < 255; i++ {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.IPv4(127, 0, 0, byte(i)))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "member.crt"), filepath.Join(dir, "member.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestDashboardTLS: over HTTPS, with auth on, the dashboard served from
// the member's own origin logs in, reads a key and saves an edit (a
// same-origin POST, which the HTTP port's browser guard lets through).
func TestDashboardTLS(t *testing.T) {
	certFile, keyFile := selfSigned(t)
	// Chromium does not know the test's CA; the Go side checks it.
	br := newBrowser(t, chromedp.Flag("ignore-certificate-errors", true))
	c := startCluster(t, "--cert-file", certFile, "--key-file", keyFile)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n1 := c.Members[0].HTTPAddr
	if err := call(ctx, n1, "POST", "/v1/kv/put", map[string]any{"key": b64("app/config"), "value": b64("blue")}, nil); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		path string
		body map[string]any
	}{
		{"/v1/auth/user/add", map[string]any{"name": "root", "password": "rootpw"}},
		{"/v1/auth/user/grant", map[string]any{"user": "root", "role": "root"}},
		{"/v1/auth/enable", map[string]any{}},
	} {
		if err := call(ctx, n1, "POST", s.path, s.body, nil); err != nil {
			t.Fatal(err)
		}
	}
	ui := "https://" + n1 + "/ui/"
	br.run(br.ctx, "login over HTTPS",
		chromedp.Navigate(ui+"#/keys?p=app%2F&k=app%2Fconfig"),
		chromedp.WaitVisible(css("#login-user")),
		chromedp.SendKeys(css("#login-user"), "root"),
		chromedp.SendKeys(css("#login-password"), "rootpw"),
		chromedp.Click(css(".login button[type=submit]")),
		until(`document.querySelector('#key-name')?.textContent === 'app/config' && (document.querySelector('#key-value')||{}).textContent?.includes('blue')`))
	br.run(br.ctx, "edit over HTTPS",
		chromedp.Click(css("#edit-key")),
		chromedp.WaitVisible(css("#edit-value")),
		chromedp.SetValue(css("#edit-value"), "green"),
		chromedp.Click(css("#save-key")),
		until(`document.querySelector('#key-version')?.textContent === '2' && document.querySelector('#key-value').textContent.includes('green')`))
	br.checkErrors()
}
