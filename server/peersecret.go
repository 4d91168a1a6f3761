package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// The peer secret keeps strangers off the peer port: every peer stream
// proves it (internal/transport's handshake). It is fixed when a member's
// data dir is created and kept in <data-dir>/peer-secret (mode 0600):
//
//   - bootstrap with --initial-cluster-token: derived from the token, so
//     every member of the new cluster has the same secret;
//   - a single node without a token: random;
//   - a multi-node bootstrap without a token: derived from
//     --initial-cluster, which is no secret, so the peer port is then
//     guarded only by the membership checks (a loud warning says so);
//   - a member that joins: handed over by the member that adds it.
const peerSecretFile = "peer-secret"

// Metadata of the join handshake: the joining member names itself, and
// is sent the peer secret in the response header once it is a member.
const (
	mdJoinMember = "dkv-join-member"
	mdPeerSecret = "dkv-peer-secret"
)

func tokenSecret(token string) []byte {
	h := sha256.Sum256([]byte("dkv-peer-secret\x00" + token))
	return h[:]
}

func defaultSecret(ms []member) []byte {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = m.name + "=" + m.peerURL
	}
	sort.Strings(parts)
	return tokenSecret("dkv-default\x00" + strings.Join(parts, ","))
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

// loadPeerSecret returns this member's peer secret, creating the file on
// first start. joined is what the join handshake handed over (nil
// otherwise); ms is the parsed --initial-cluster of a bootstrap.
func (s *Server) loadPeerSecret(bootstrap bool, ms []member, joined []byte) ([]byte, error) {
	// A data dir without raft state has never been part of a cluster (a
	// start that failed early may have left a file): derive afresh.
	sec, err := s.readPeerSecret()
	if bootstrap || joined != nil {
		err = fs.ErrNotExist
	}
	if err == nil {
		if s.cfg.InitialClusterToken != "" && !bytes.Equal(sec, tokenSecret(s.cfg.InitialClusterToken)) {
			s.log.Warn("--initial-cluster-token is ignored: this member's peer secret was fixed when its data dir was created", "file", s.peerSecretPath())
		}
		s.warnIfDerived(sec, ms)
		return sec, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	switch {
	case joined != nil:
		sec = joined
	case s.cfg.InitialClusterToken != "":
		sec = tokenSecret(s.cfg.InitialClusterToken)
	case bootstrap && len(ms) == 1:
		sec = make([]byte, 32)
		if _, err := rand.Read(sec); err != nil {
			return nil, err
		}
	default:
		// A multi-node bootstrap without a token, a join whose cluster
		// did not hand one over, or a data dir from before peer secrets.
		if len(ms) == 0 {
			ms = []member{{s.cfg.Name, s.cfg.PeerAddr}}
			if parsed, err := parseInitialCluster(&s.cfg); err == nil {
				ms = parsed
			}
		}
		sec = defaultSecret(ms)
		s.warnIfDerived(sec, ms)
	}
	if err := s.writePeerSecret(sec); err != nil {
		return nil, err
	}
	return sec, nil
}

// warnIfDerived says, at every start, that the peer secret is the one
// anybody can derive from --initial-cluster.
func (s *Server) warnIfDerived(sec []byte, ms []member) {
	if len(ms) == 0 {
		parsed, err := parseInitialCluster(&s.cfg)
		if err != nil {
			return
		}
		ms = parsed
	}
	if bytes.Equal(sec, defaultSecret(ms)) {
		s.log.Warn("PEER PORT NOT SECRET: this cluster was bootstrapped without --initial-cluster-token, so its peer secret is derived from --initial-cluster, which anyone can learn; the peer port is protected only by membership checks (docs/cluster.md, peer security)")
	}
}

// joinContext asks for the peer secret in a join call's response header.
func joinContext(ctx context.Context, memberID uint64) context.Context {
	return metadata.AppendToOutgoingContext(ctx, mdJoinMember, strconv.FormatUint(memberID, 16))
}

// joinedSecret reads the peer secret from a join call's response header.
func joinedSecret(hdr metadata.MD) []byte {
	v := hdr.Get(mdPeerSecret)
	if len(v) != 1 {
		return nil
	}
	sec, err := hex.DecodeString(v[0])
	if err != nil || len(sec) == 0 {
		return nil
	}
	return sec
}

// offerPeerSecret hands the peer secret to a joining member named in the
// call's metadata, once it is in the member table and before
// this member has heard from it. The client port is not
// authenticated yet, so whoever may add a member learns the secret: it
// keeps out those who only know the public ids (docs/cluster.md).
func (s *Server) offerPeerSecret(ctx context.Context, members []*dkvpb.Member) {
	if len(s.peerSecret) == 0 {
		return
	}
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get(mdJoinMember)
	if len(v) != 1 {
		return
	}
	id, err := strconv.ParseUint(v[0], 16, 64)
	if err != nil {
		return
	}
	for _, m := range members {
		// Only to a member this member has never heard from: once the
		// new member talks to the cluster it has the secret already, and
		// a stranger who names it later learns nothing.
		if m.GetId() == id {
			if _, heard := s.contacts.get(id); heard {
				return
			}
			_ = grpc.SetHeader(ctx, metadata.Pairs(mdPeerSecret, hex.EncodeToString(s.peerSecret)))
			return
		}
	}
}

func memberIDs(ms []*dkvpb.Member) []uint64 {
	ids := make([]uint64, 0, len(ms))
	for _, m := range ms {
		ids = append(ids, m.GetId())
	}
	return ids
}
