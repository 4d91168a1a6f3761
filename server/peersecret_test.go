package server

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func secretServer(t *testing.T, dir, name, initial, token string) (*Server, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	cfg := Config{Name: name, DataDir: dir, PeerAddr: "127.0.0.1:1", InitialCluster: initial, InitialClusterToken: token}
	s := &Server{cfg: cfg, log: slog.New(slog.NewTextHandler(&logs, nil))}
	return s, &logs
}

func bootSecret(t *testing.T, dir, name, initial, token string) ([]byte, string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s, logs := secretServer(t, dir, name, initial, token)
	ms, err := parseInitialCluster(&s.cfg)
	if err != nil {
		t.Fatal(err)
	}
	sec, err := s.loadPeerSecret(true, ms, nil)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, peerSecretFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("peer-secret: %v, mode %v", err, fi.Mode().Perm())
	}
	return sec, logs.String()
}

func TestPeerSecretAtBootstrap(t *testing.T) {
	root := t.TempDir()
	const ic = "n1=127.0.0.1:1,n2=127.0.0.1:2"

	// The same token gives every member the same secret, quietly.
	a, logA := bootSecret(t, filepath.Join(root, "t1"), "n1", ic, "tok")
	b, _ := bootSecret(t, filepath.Join(root, "t2"), "n2", ic, "tok")
	if !bytes.Equal(a, b) || strings.Contains(logA, "PEER PORT NOT SECRET") {
		t.Fatalf("token bootstrap: equal=%v, log %q", bytes.Equal(a, b), logA)
	}

	// No token: members still agree, and each start says how weak it is.
	c, logC := bootSecret(t, filepath.Join(root, "d1"), "n1", ic, "")
	d, _ := bootSecret(t, filepath.Join(root, "d2"), "n2", ic, "")
	if !bytes.Equal(c, d) || bytes.Equal(c, a) {
		t.Fatal("default secrets differ between members, or equal the token's")
	}
	if !strings.Contains(logC, "PEER PORT NOT SECRET") {
		t.Fatalf("no warning for a bootstrap without a token: %q", logC)
	}
	s, logs := secretServer(t, filepath.Join(root, "d1"), "n1", ic, "")
	again, err := s.loadPeerSecret(false, nil, nil)
	if err != nil || !bytes.Equal(again, c) || !strings.Contains(logs.String(), "PEER PORT NOT SECRET") {
		t.Fatalf("restart: err %v, same %v, log %q", err, bytes.Equal(again, c), logs.String())
	}

	// A single node picks a random secret.
	e, _ := bootSecret(t, filepath.Join(root, "s1"), "n1", "", "")
	f, _ := bootSecret(t, filepath.Join(root, "s2"), "n1", "", "")
	if bytes.Equal(e, f) || len(e) != 32 {
		t.Fatal("single-node secrets are not random")
	}

	// A later token does not change a member's secret.
	s, logs = secretServer(t, filepath.Join(root, "t1"), "n1", ic, "other")
	kept, err := s.loadPeerSecret(false, nil, nil)
	if err != nil || !bytes.Equal(kept, a) || !strings.Contains(logs.String(), "ignored") {
		t.Fatalf("token changed on restart: err %v, kept %v, log %q", err, bytes.Equal(kept, a), logs.String())
	}
}
