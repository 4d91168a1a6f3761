package state

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/storage"
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
			if err := storage.DeleteMember(b, id); err != nil {
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
			if err := storage.SetMember(b, id, data); err != nil {
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

// SetMemberClientURL records a member's client URL in the member table.
func SetMemberClientURL(b *pebble.Batch, id uint64, url string) error {
	return SetMemberAttrs(b, id, url, "")
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
	return storage.SetMember(b, id, data)
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
	recs, err := storage.Members(r)
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
