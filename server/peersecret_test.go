package server

import (
	"bytes"
	"errors"
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

// bootSecret creates the peer secret of a fresh member as a bootstrap
// of --initial-cluster does, after needPeerSecret.
func bootSecret(t *testing.T, s *Server) ([]byte, error) {
	t.Helper()
	if err := os.MkdirAll(s.cfg.DataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	ms, err := parseInitialCluster(&s.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.needPeerSecret(len(ms) > 1); err != nil {
		return nil, err
	}
	s.clusterID = clusterIDOf(ms)
	sec, err := s.loadPeerSecret(true, ms)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(s.cfg.DataDir, peerSecretFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("peer-secret: %v, mode %v", err, fi.Mode().Perm())
	}
	return sec, nil
}

func TestPeerSecretAtBootstrap(t *testing.T) {
	root := t.TempDir()
	const ic = "n1=127.0.0.1:1,n2=127.0.0.1:2"
	boot := func(dir, name, initial, token string) ([]byte, string) {
		s, logs := secretServer(t, filepath.Join(root, dir), name, initial, token)
		sec, err := bootSecret(t, s)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		if s.InsecurePeer() != strings.Contains(logs.String(), "INSECURE PEER PORT") {
			t.Fatalf("%s: InsecurePeer %v, but log %q", dir, s.InsecurePeer(), logs.String())
		}
		return sec, logs.String()
	}

	// The same token gives every member the same secret, quietly.
	a, logA := boot("t1", "n1", ic, "tok")
	b, _ := boot("t2", "n2", ic, "tok")
	if !bytes.Equal(a, b) || strings.Contains(logA, "INSECURE") {
		t.Fatalf("token bootstrap: equal=%v, log %q", bytes.Equal(a, b), logA)
	}

	// A secret file does the same, with the file's secret.
	file := filepath.Join(root, "secret")
	hexSec, err := NewPeerSecret()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(hexSec), 0o600); err != nil {
		t.Fatal(err)
	}
	fromFile, err := ReadPeerSecretFile(file)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := secretServer(t, filepath.Join(root, "f1"), "n1", ic, "")
	s.cfg.PeerSecretFile = file
	if got, err := bootSecret(t, s); err != nil || !bytes.Equal(got, fromFile) || s.InsecurePeer() {
		t.Fatalf("secret file bootstrap: err %v, same %v, insecure %v", err, bytes.Equal(got, fromFile), s.InsecurePeer())
	}

	// No token, no file, no TLS: refused, naming the flags, and nothing
	// is written.
	s, _ = secretServer(t, filepath.Join(root, "d1"), "n1", ic, "")
	if _, err := bootSecret(t, s); !errors.Is(err, ErrNoPeerSecret) {
		t.Fatalf("multi-node bootstrap without a secret: %v, want ErrNoPeerSecret", err)
	}
	for _, flag := range []string{"--initial-cluster-token", "--peer-secret-file", "--peer-cert-file", "--insecure-peer"} {
		if !strings.Contains(ErrNoPeerSecret.Error(), flag) {
			t.Errorf("ErrNoPeerSecret does not name %s: %v", flag, ErrNoPeerSecret)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "d1", peerSecretFile)); !os.IsNotExist(err) {
		t.Fatalf("a refused start left a peer secret: %v", err)
	}

	// --insecure-peer: it starts, the members agree on the derived
	// secret, and every start says so.
	insecure := func(dir, name string) ([]byte, string) {
		s, logs := secretServer(t, filepath.Join(root, dir), name, ic, "")
		s.cfg.InsecurePeer = true
		sec, err := bootSecret(t, s)
		if err != nil || !s.InsecurePeer() {
			t.Fatalf("--insecure-peer: err %v, InsecurePeer %v", err, s.InsecurePeer())
		}
		return sec, logs.String()
	}
	c, logC := insecure("i1", "n1")
	d, _ := insecure("i2", "n2")
	if !bytes.Equal(c, d) || bytes.Equal(c, a) || !strings.Contains(logC, "INSECURE PEER PORT") {
		t.Fatalf("--insecure-peer: members agree %v, equal to the token's %v, log %q", bytes.Equal(c, d), bytes.Equal(c, a), logC)
	}
	s, logs := secretServer(t, filepath.Join(root, "i1"), "n1", ic, "")
	s.clusterID = clusterIDOf([]member{{"n1", "127.0.0.1:1"}, {"n2", "127.0.0.1:2"}})
	again, err := s.loadPeerSecret(false, nil)
	if err != nil || !bytes.Equal(again, c) || !s.InsecurePeer() || !strings.Contains(logs.String(), "INSECURE PEER PORT") {
		t.Fatalf("restart: err %v, same %v, log %q", err, bytes.Equal(again, c), logs.String())
	}

	// A single node picks a random secret, without a word.
	e, logE := boot("s1", "n1", "", "")
	f, _ := boot("s2", "n1", "", "")
	if bytes.Equal(e, f) || len(e) != 32 || strings.Contains(logE, "INSECURE") {
		t.Fatal("single-node secrets are not random, or warned about")
	}

	// A later token does not change a member's secret.
	s, logs = secretServer(t, filepath.Join(root, "t1"), "n1", ic, "other")
	kept, err := s.loadPeerSecret(false, nil)
	if err != nil || !bytes.Equal(kept, a) || !strings.Contains(logs.String(), "ignored") {
		t.Fatalf("token changed on restart: err %v, kept %v, log %q", err, bytes.Equal(kept, a), logs.String())
	}
}

// A data dir whose members derived their secret from --initial-cluster
// (bootstrapped without a token before ErrNoPeerSecret) still starts,
// with the same secret, and warns at every start.
func TestDerivedPeerSecretOfAnOlderDataDirStillStarts(t *testing.T) {
	dir := t.TempDir()
	const ic = "n1=127.0.0.1:1,n2=127.0.0.1:2"
	ms := []member{{"n1", "127.0.0.1:1"}, {"n2", "127.0.0.1:2"}}
	s, logs := secretServer(t, dir, "n1", ic, "")
	if err := s.writePeerSecret(defaultSecret(ms)); err != nil {
		t.Fatal(err)
	}
	s.clusterID = clusterIDOf(ms)
	sec, err := s.loadPeerSecret(false, nil)
	if err != nil || !bytes.Equal(sec, defaultSecret(ms)) {
		t.Fatalf("restart of a derived-secret data dir: err %v, kept %v", err, bytes.Equal(sec, defaultSecret(ms)))
	}
	if !s.InsecurePeer() || !strings.Contains(logs.String(), "INSECURE PEER PORT") {
		t.Fatalf("no warning for a derived secret: %q", logs.String())
	}
}

func TestPeerSecretFileIsChecked(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{"short": "abcd\n", "not hex": "my cluster password\n", "empty": ""} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadPeerSecretFile(p); err == nil || !strings.Contains(err.Error(), "openssl rand -hex 32") {
			t.Errorf("%s secret file: %v, want a refusal saying how to make one", name, err)
		}
	}
	if _, err := ReadPeerSecretFile(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing secret file was accepted")
	}
}
