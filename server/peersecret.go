package server

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
)

// The peer secret keeps strangers off the peer port: every peer stream
// proves it (internal/transport's handshake). It never travels over the
// client API: every member gets it from its operator. It is fixed when a
// member's data dir is created and kept in <data-dir>/peer-secret (mode
// 0600):
//
//   - with --initial-cluster-token: derived from the token, so every
//     member started with the same token (at bootstrap or when joining)
//     has the same secret;
//   - with --peer-secret-file: the secret in that file (hex, as in a
//     member's <data-dir>/peer-secret, which may be copied);
//   - a single node without either: random (a member that joins it later
//     is started with --peer-secret-file, a copy of that file);
//   - a multi-node bootstrap or a join without either is refused
//     (ErrNoPeerSecret) unless peer TLS guards the peer port or
//     --insecure-peer accepts a secret anybody can derive from the
//     cluster id.
//
// Data dirs created before these rules keep the secret they have; one
// that anybody can derive is warned about at every start.
const peerSecretFile = "peer-secret"

// ErrNoPeerSecret: a member of a multi-node cluster started for the first
// time with no peer secret chosen by the operator. Without one, anyone who
// can reach a peer port can write to the cluster.
var ErrNoPeerSecret = errors.New("no peer secret: a member of a multi-node cluster needs --initial-cluster-token (the same on every member, and on members that join later), " +
	"--peer-secret-file (a file holding the secret, e.g. a copy of a member's DATA-DIR/peer-secret) " +
	"or peer TLS (--peer-cert-file, --peer-key-file, --peer-trusted-ca-file); " +
	"--insecure-peer starts without one, and then anyone who can reach a peer port can write to the cluster (docs/cluster.md)")

// minSecretBytes is the shortest secret --peer-secret-file may hold.
const minSecretBytes = 16

func tokenSecret(token string) []byte {
	h := sha256.Sum256([]byte("dkv-peer-secret\x00" + token))
	return h[:]
}

// defaultSecret is what members bootstrapped without a token derived
// their secret from before ErrNoPeerSecret: --initial-cluster.
func defaultSecret(ms []member) []byte {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = m.name + "=" + m.peerURL
	}
	sort.Strings(parts)
	return tokenSecret("dkv-default\x00" + strings.Join(parts, ","))
}

// clusterSecret is the secret of a cluster whose operator chose none
// (peer TLS guards it, or --insecure-peer): every member, including one
// that joins, can derive it from the cluster id; so can anybody else.
func clusterSecret(clusterID uint64) []byte {
	return tokenSecret("dkv-cluster-id\x00" + string(binary.BigEndian.AppendUint64(nil, clusterID)))
}

// ReadPeerSecretFile reads a secret as --peer-secret-file holds it: hex,
// at least 16 bytes, surrounding white space ignored.
func ReadPeerSecretFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("peer secret file: %w", err)
	}
	sec, err := hex.DecodeString(string(bytes.TrimSpace(b)))
	if err != nil || len(sec) < minSecretBytes {
		return nil, fmt.Errorf("peer secret file %s must hold at least %d random bytes in hex (generate one with: openssl rand -hex 32)", path, minSecretBytes)
	}
	return sec, nil
}

// NewPeerSecret returns a random secret in the form --peer-secret-file reads.
func NewPeerSecret() (string, error) {
	sec := make([]byte, 32)
	if _, err := rand.Read(sec); err != nil {
		return "", err
	}
	return hex.EncodeToString(sec) + "\n", nil
}

func (s *Server) peerSecretPath() string { return filepath.Join(s.cfg.DataDir, peerSecretFile) }

func (s *Server) readPeerSecret() ([]byte, error) {
	b, err := os.ReadFile(s.peerSecretPath())
	if err != nil {
		return nil, err
	}
	sec, err := hex.DecodeString(string(bytes.TrimSpace(b)))
	if err != nil || len(sec) == 0 {
		return nil, fmt.Errorf("%s is damaged (not a hex secret); restore it from another member's data dir", s.peerSecretPath())
	}
	return sec, nil
}

func (s *Server) writePeerSecret(sec []byte) error {
	path := s.peerSecretPath()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(hex.EncodeToString(sec)+"\n"), 0o600); err != nil {
		return fmt.Errorf("write peer secret: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write peer secret: %w", err)
	}
	return nil
}

// configuredSecret is the secret the operator chose (nil for none).
func (s *Server) configuredSecret() ([]byte, error) {
	switch {
	case s.cfg.PeerSecretFile != "":
		return ReadPeerSecretFile(s.cfg.PeerSecretFile)
	case s.cfg.InitialClusterToken != "":
		return tokenSecret(s.cfg.InitialClusterToken), nil
	}
	return nil, nil
}

// needPeerSecret refuses to create a member of a multi-node cluster
// without a secret the operator chose, peer TLS, or --insecure-peer.
func (s *Server) needPeerSecret(multi bool) error {
	c := &s.cfg
	if !multi || c.PeerAddr == "" || c.InitialClusterToken != "" || c.PeerSecretFile != "" || c.PeerTLS.Enabled() || c.InsecurePeer {
		return nil
	}
	return ErrNoPeerSecret
}

// loadPeerSecret returns this member's peer secret, creating the file
// when the data dir is fresh (a bootstrap or a join: needPeerSecret has
// passed). ms is the parsed --initial-cluster of a bootstrap.
func (s *Server) loadPeerSecret(fresh bool, ms []member) ([]byte, error) {
	conf, err := s.configuredSecret()
	if err != nil {
		return nil, err
	}
	if !fresh {
		sec, err := s.readPeerSecret()
		if err == nil {
			if conf != nil && !bytes.Equal(sec, conf) {
				s.log.Warn("--initial-cluster-token and --peer-secret-file are ignored: this member's peer secret was fixed when its data dir was created", "file", s.peerSecretPath())
			}
			s.noteDerived(sec, ms)
			return sec, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		// A data dir from before peer secrets: its fellow members
		// derived theirs from --initial-cluster then.
		sec = conf
		if sec == nil {
			if ms == nil {
				if ms, err = parseInitialCluster(&s.cfg); err != nil {
					ms = []member{{s.cfg.Name, s.cfg.PeerAddr}}
				}
			}
			sec = defaultSecret(ms)
		}
		if err := s.writePeerSecret(sec); err != nil {
			return nil, err
		}
		s.noteDerived(sec, ms)
		return sec, nil
	}
	sec := conf
	switch {
	case sec != nil:
	case len(ms) == 1:
		sec = make([]byte, 32)
		if _, err := rand.Read(sec); err != nil {
			return nil, err
		}
	default:
		// Peer TLS or --insecure-peer (needPeerSecret).
		sec = clusterSecret(s.clusterID)
	}
	if err := s.writePeerSecret(sec); err != nil {
		return nil, err
	}
	s.noteDerived(sec, ms)
	return sec, nil
}

// noteDerived warns, at every start, when the peer secret is one anybody
// can derive (from --initial-cluster or the cluster id) and no peer TLS
// guards the port; /readyz and the dashboard then say so too.
func (s *Server) noteDerived(sec []byte, ms []member) {
	derived := bytes.Equal(sec, clusterSecret(s.clusterID))
	if !derived {
		if ms == nil {
			ms, _ = parseInitialCluster(&s.cfg)
		}
		derived = ms != nil && bytes.Equal(sec, defaultSecret(ms))
	}
	if !derived || s.cfg.PeerTLS.Enabled() {
		return
	}
	s.insecurePeer.Store(true)
	s.log.Warn("INSECURE PEER PORT: this member's peer secret is derived from public facts (it was started with --insecure-peer, or bootstrapped without --initial-cluster-token), " +
		"so anyone who can reach a peer port can write to the cluster; to fix it, stop every member, write one new secret (openssl rand -hex 32) into every DATA-DIR/peer-secret and start them again, or turn on peer TLS (docs/cluster.md, Peer security)")
}

// InsecurePeer reports whether this member's peer port is guarded by a
// secret anybody can derive, and no peer TLS.
func (s *Server) InsecurePeer() bool { return s.insecurePeer.Load() }

func memberIDs(ms []*dkvpb.Member) []uint64 {
	ids := make([]uint64, 0, len(ms))
	for _, m := range ms {
		ids = append(ids, m.GetId())
	}
	return ids
}
