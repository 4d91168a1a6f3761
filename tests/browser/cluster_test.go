package browser

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/dkv-io/dkv/internal/testutil"
)

// cluster is three dkv processes this test started (testutil.NewCluster),
// each with an HTTP port.
type cluster struct{ *testutil.Cluster }

// startCluster starts three members with HTTP ports and the extra serve
// flags, and waits until each reports the same leader. With --cert-file
// in extra, call speaks HTTPS to them.
func startCluster(t testing.TB, extra ...string) *cluster {
	t.Helper()
	c := &cluster{testutil.NewCluster(t, testutil.ClusterOptions{HTTP: true, Args: extra})}
	for i, a := range extra {
		if a == "--cert-file" && i+1 < len(extra) {
			hc := httpsClient(t, extra[i+1])
			for _, m := range c.Members {
				tlsClients.Store(m.HTTPAddr, hc)
			}
		}
	}
	testutil.EventuallyNoError(t, 60*time.Second, "a leader every member agrees on", func(context.Context) error {
		for _, m := range c.Members {
			if !m.Running() {
				t.Fatalf("%s exited: %v%s", m.Name, m.Err(), c.Logs(15))
			}
		}
		_, err := c.leader()
		return err
	})
	return c
}

// leader is the name of the leader every member agrees on.
func (c *cluster) leader() (string, error) {
	var leader string
	for _, m := range c.Members {
		var ml struct {
			LeaderID string `json:"leader_id"`
			Members  []struct{ ID, Name string }
		}
		if err := call(context.Background(), m.HTTPAddr, "GET", "/v1/cluster/members", nil, &ml); err != nil {
			return "", err
		}
		name := ""
		for _, x := range ml.Members {
			if x.ID == ml.LeaderID {
				name = x.Name
			}
		}
		if name == "" || (leader != "" && name != leader) {
			return "", fmt.Errorf("%s: no agreed leader yet", m.Name)
		}
		leader = name
	}
	return leader, nil
}

var httpc = &http.Client{Timeout: 60 * time.Second}

// tlsClients holds the HTTPS client of each member started with
// --cert-file, by HTTP address; call uses it.
var tlsClients sync.Map

// httpsClient trusts the self-signed certificate in certFile.
func httpsClient(t testing.TB, certFile string) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("no certificate in %s", certFile)
	}
	// The members listen on random 127.0.0.0/8 addresses (testutil.FreeAddr),
	// which no certificate made before they were picked can name: check
	// the certificate's chain and its name "localhost" instead.
	return &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}}}
}

// call sends a JSON request to the member's HTTP API and decodes the answer.
func call(ctx context.Context, addr, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	scheme, hc := "http", httpc
	if v, ok := tlsClients.Load(addr); ok {
		scheme, hc = "https", v.(*http.Client)
	}
	req, err := http.NewRequestWithContext(ctx, method, scheme+"://"+addr+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json") // the HTTP port takes no other JSON (docs/security.md)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
