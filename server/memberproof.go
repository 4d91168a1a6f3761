package server

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/auth"
	"google.golang.org/grpc/metadata"
)

// Member proofs let the divergence check (corrupt.go) ask the other
// members for Status and HashKV when auth is enabled, without a user's
// credentials: the caller proves it holds the cluster's peer secret with
// an HMAC over the method, its member id and the current minute. A valid
// proof from a current member counts as root for those two read-only
// calls, and for nothing else. A recorded proof can be replayed for about
// two minutes, and then reveals only a hash and a member's status.

const mdMemberProof = "dkv-member-proof"

// memberProofCalls are the only calls a proof admits.
var memberProofCalls = map[string]bool{
	dkvpb.Cluster_Status_FullMethodName: true,
	dkvpb.Cluster_HashKV_FullMethodName: true,
}

func (s *Server) proofMAC(method string, id uint64, minute int64) []byte {
	m := hmac.New(sha256.New, s.peerSecret)
	fmt.Fprintf(m, "dkv-member-proof\x00%s\x00%x\x00%d", method, id, minute)
	return m.Sum(nil)
}

// withMemberProof adds this member's proof for method to ctx.
func (s *Server) withMemberProof(ctx context.Context, method string) context.Context {
	if len(s.peerSecret) == 0 {
		return ctx
	}
	minute := time.Now().Unix() / 60
	return metadata.AppendToOutgoingContext(ctx, mdMemberProof,
		fmt.Sprintf("%x:%d:%s", s.memberID, minute, hex.EncodeToString(s.proofMAC(method, s.memberID, minute))))
}

// memberCaller returns a root caller for a call with a valid proof from
// a current member of this cluster, and false otherwise.
func (s *Server) memberCaller(ctx context.Context, method string) (*auth.User, bool) {
	if !memberProofCalls[method] || len(s.peerSecret) == 0 {
		return nil, false
	}
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return nil, false
	}
	v := md.Get(mdMemberProof)
	if len(v) != 1 {
		return nil, false
	}
	parts := strings.Split(v[0], ":")
	if len(parts) != 3 {
		return nil, false
	}
	id, err1 := strconv.ParseUint(parts[0], 16, 64)
	minute, err2 := strconv.ParseInt(parts[1], 10, 64)
	mac, err3 := hex.DecodeString(parts[2])
	if err1 != nil || err2 != nil || err3 != nil || id == 0 {
		return nil, false
	}
	// Members' clocks may differ by a little: a minute either way.
	if d := time.Now().Unix()/60 - minute; d < -1 || d > 1 {
		return nil, false
	}
	if !hmac.Equal(mac, s.proofMAC(method, id, minute)) {
		return nil, false
	}
	ms, err := s.sm.Latest().Members()
	if err != nil {
		return nil, false
	}
	for _, m := range ms {
		if m.GetId() == id {
			return &auth.User{Name: fmt.Sprintf("member %x", id), Root: true}, true
		}
	}
	return nil, false
}
