package state

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/keys"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// ApplyMembership mirrors a conf change into the replicated member table,
// using the member record the proposer put in the change's context.
func ApplyMembership(b *pebble.Batch, cc *raftpb.ConfChangeV2, ctxData []byte) error {
	var m *dkvpb.Member
	if len(ctxData) > 0 {
		c := &dkvpb.ConfChangeContext{}
		if err := proto.Unmarshal(ctxData, c); err == nil {
			m = c.GetMember()
		}
	}
	for _, ch := range cc.GetChanges() {
		id := ch.GetNodeId()
		switch ch.GetType() {
		case raftpb.ConfChangeRemoveNode:
			if err := deleteMember(b, id); err != nil {
				return err
			}
		case raftpb.ConfChangeAddNode, raftpb.ConfChangeAddLearnerNode, raftpb.ConfChangeUpdateNode:
			rec := &dkvpb.Member{Id: id}
			old, err := memberRecord(b, id)
			if err == nil && old != nil {
				rec = old
			}
			if ch.GetType() == raftpb.ConfChangeUpdateNode {
				// A peer URL change (server.UpdateMemberPeer): only
				// of a member in the table, to an address no other
				// member uses; the member's role is raft's and stays.
				if old == nil || m == nil || m.GetId() != id || peerURLTaken(b, id, m.GetPeerUrl()) {
					continue
				}
				rec.PeerUrl = m.GetPeerUrl()
			} else {
				if m != nil && m.GetId() == id {
					rec.Name, rec.PeerUrl = m.GetName(), m.GetPeerUrl()
					if m.GetClientUrl() != "" {
						rec.ClientUrl = m.GetClientUrl()
					}
				}
				rec.IsLearner = ch.GetType() == raftpb.ConfChangeAddLearnerNode
			}
			data, err := proto.Marshal(rec)
			if err != nil {
				return err
			}
			if err := setMember(b, id, data); err != nil {
				return err
			}
		}
	}
	return nil
}

// peerURLTaken reports whether a member other than id uses url.
func peerURLTaken(r pebble.Reader, id uint64, url string) bool {
	all, err := Members(r)
	if err != nil {
		return true
	}
	for _, m := range all {
		if m.GetId() != id && m.GetPeerUrl() == url {
			return true
		}
	}
	return false
}

// SetMemberAttrs records a member's client URL and, unless version is "",
// its server version in the member table.
func SetMemberAttrs(b *pebble.Batch, id uint64, url, version string) error {
	m, err := memberRecord(b, id)
	if err != nil || m == nil {
		return err
	}
	m.ClientUrl = url
	if version != "" {
		m.Version = version
	}
	data, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	return setMember(b, id, data)
}

func memberRecord(r pebble.Reader, id uint64) (*dkvpb.Member, error) {
	all, err := Members(r)
	if err != nil {
		return nil, err
	}
	for _, m := range all {
		if m.GetId() == id {
			return m, nil
		}
	}
	return nil, nil
}

// Members reads the member table as of r's view.
func Members(r pebble.Reader) ([]*dkvpb.Member, error) {
	recs, err := readMembers(r)
	if err != nil {
		return nil, err
	}
	out := make([]*dkvpb.Member, 0, len(recs))
	for _, rec := range recs {
		m := &dkvpb.Member{}
		if err := proto.Unmarshal(rec, m); err != nil {
			return nil, fmt.Errorf("decode member: %w", err)
		}
		out = append(out, m)
	}
	return out, nil
}

// A member publishing its client URL and version (raft conf changes
// carry only peer URLs).
var memberAttrsCommand = Command{
	name: "member_attrs",
	apply: func(_ *Machine, b *pebble.Batch, req *dkvpb.InternalRequest) Result {
		r := req.GetMemberAttrs()
		must(SetMemberAttrs(b, r.GetId(), r.GetClientUrl(), r.GetVersion()))
		return Result{}
	},
}

// The member table's records: "s/raft/members/<member id, 8 bytes BE>" -> the
// encoded dkvpb.Member. The bytes are a stored format.

func memberKey(id uint64) []byte {
	k := make([]byte, len(keys.MemberPrefix)+8)
	copy(k, keys.MemberPrefix)
	binary.BigEndian.PutUint64(k[len(keys.MemberPrefix):], id)
	return k
}

// setMember records a cluster member in the replicated state.
func setMember(b *pebble.Batch, id uint64, data []byte) error {
	return b.Set(memberKey(id), data, nil)
}

// deleteMember removes a member from the replicated state.
func deleteMember(b *pebble.Batch, id uint64) error {
	return b.Delete(memberKey(id), nil)
}

// readMembers returns every recorded member's encoded record, in id order.
func readMembers(r pebble.Reader) ([][]byte, error) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: keys.MemberPrefix, UpperBound: keys.MemberEnd})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out [][]byte
	for it.First(); it.Valid(); it.Next() {
		out = append(out, append([]byte(nil), it.Value()...))
	}
	return out, it.Error()
}
