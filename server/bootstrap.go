package server

import (
	"context"
	"fmt"
	"hash/fnv"
	"net"
	"sort"
	"strings"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/lease"
	"github.com/dkv-io/dkv/internal/mvcc"
	"github.com/dkv-io/dkv/internal/raftnode"
	"github.com/dkv-io/dkv/internal/state"
	"github.com/dkv-io/dkv/internal/transport"
	"go.etcd.io/raft/v3"
	"google.golang.org/protobuf/proto"
)

// member is one entry of --initial-cluster.
type member struct{ name, peerURL string }

func parseInitialCluster(cfg *Config) ([]member, error) {
	if cfg.InitialCluster == "" {
		return []member{{cfg.Name, cfg.PeerAddr}}, nil
	}
	var ms []member
	seen := map[string]bool{}
	for _, part := range strings.Split(cfg.InitialCluster, ",") {
		name, url, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || name == "" || url == "" {
			return nil, fmt.Errorf("initial cluster entry %q is not name=host:port", part)
		}
		if _, port, err := net.SplitHostPort(url); err != nil || port == "" {
			return nil, fmt.Errorf("initial cluster entry %q: peer address %q is not host:port", part, url)
		}
		if seen[name] {
			return nil, fmt.Errorf("initial cluster names %q twice", name)
		}
		seen[name] = true
		ms = append(ms, member{name, url})
	}
	if !seen[cfg.Name] {
		return nil, fmt.Errorf("initial cluster %q does not contain this member's name %q", cfg.InitialCluster, cfg.Name)
	}
	return ms, nil
}

// MemberID derives a member's raft id from its name and peer URL, so ids
// are stable across restarts and the same on every node.
func MemberID(name, peerURL string) uint64 {
	h := fnv.New64a()
	h.Write([]byte("dkv-member\x00" + name + "\x00" + peerURL))
	id := h.Sum64()
	if id == 0 {
		id = 1
	}
	return id
}

func clusterIDOf(ms []member) uint64 {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = m.name + "=" + m.peerURL
	}
	sort.Strings(parts)
	h := fnv.New64a()
	h.Write([]byte("dkv-cluster\x00" + strings.Join(parts, ",")))
	return h.Sum64()
}

// The state machine is wired to the Ready loop here; package state knows
// nothing of raftnode.
var _ raftnode.StateMachine[state.Result] = (*state.Machine)(nil)

func (s *Server) startNode(ctx context.Context) error {
	s.limits = mvcc.Limits{MaxValueBytes: s.cfg.MaxValueBytes, MaxTxnOps: s.cfg.MaxTxnOps}
	s.limits.EnsureDefaults()
	kv, err := mvcc.Open(s.store.DB(), s.limits)
	if err != nil {
		return err
	}
	s.kv = kv
	s.lessor = lease.NewLessor(s.cfg.LeaseClock, s.cfg.LeaseMaxClockDrift, s.cfg.LeaseCheckpointInterval)
	s.lessor.SetRenewWindow(s.cfg.LeaseRenewWindow) // negative: off
	s.renewer = newRenewer(s)
	if s.sm, err = state.New(kv, s.store, effects{s}, s.log); err != nil {
		return err
	}
	if err := s.loadLeases(); err != nil {
		return err
	}

	var (
		peers   []raft.Peer
		join    bool
		initial []*dkvpb.Member // peer addresses known before the member table
		boot    []member        // --initial-cluster of a bootstrap
	)
	switch {
	case s.store.HasRaftState():
		if s.memberID, err = s.metaUint("member_id"); err != nil {
			return err
		}
		if s.clusterID, err = s.metaUint("cluster_id"); err != nil {
			return err
		}
		// A binary too far from the versions the other members last
		// published would run the cluster on two incompatible formats.
		ms, err := s.sm.Latest().Members()
		if err != nil {
			return err
		}
		if err := checkVersions(Version, s.memberID, ms); err != nil {
			return fmt.Errorf("refusing to start: %w", err)
		}
	case s.cfg.InitialClusterState == "existing":
		// Before asking the cluster to add this member, which could
		// then never talk to it.
		if err := s.needPeerSecret(true); err != nil {
			return err
		}
		if s.memberID, s.clusterID, initial, err = s.joinCluster(ctx); err != nil {
			return err
		}
		join = true
	default:
		ms := []member{{s.cfg.Name, s.advPeer}}
		if s.cfg.InitialCluster != "" {
			if ms, err = parseInitialCluster(&s.cfg); err != nil {
				return err
			}
		}
		if err := s.needPeerSecret(len(ms) > 1); err != nil {
			return err
		}
		s.clusterID = clusterIDOf(ms)
		if err := s.restoredCluster(ms); err != nil {
			return err
		}
		boot = ms
		for _, m := range ms {
			id := MemberID(m.name, m.peerURL)
			rec := &dkvpb.Member{Id: id, Name: m.name, PeerUrl: m.peerURL}
			// Bootstrap entries must be byte-identical on every member,
			// so they carry only what all members know; each member
			// publishes its client URL once it is ready.
			if m.name == s.cfg.Name {
				s.memberID = id
			}
			initial = append(initial, rec)
			ctxData, err := proto.Marshal(&dkvpb.ConfChangeContext{Member: rec})
			if err != nil {
				return err
			}
			peers = append(peers, raft.Peer{ID: id, Context: ctxData})
		}
	}
	if !s.store.HasRaftState() {
		if err := s.setMetaUint("member_id", s.memberID); err != nil {
			return err
		}
		if err := s.setMetaUint("cluster_id", s.clusterID); err != nil {
			return err
		}
	}
	if s.cfg.PeerAddr != "" {
		if s.peerSecret, err = s.loadPeerSecret(boot != nil || join, boot); err != nil {
			return err
		}
		tc := transport.Config{
			ID: s.memberID, ClusterID: s.clusterID, Storage: s.store,
			Logger: s.log, Faults: s.cfg.PeerFaults, Secret: s.peerSecret,
		}
		if s.tls != nil {
			tc.TLS = s.tls.peerDial
		}
		s.transport = transport.New(tc)
	}
	rc := raftnode.Config[state.Result]{
		ID:            s.memberID,
		Storage:       s.store,
		StateMachine:  s.sm,
		TickInterval:  s.cfg.TickInterval,
		ElectionTicks: s.cfg.ElectionTicks,
		Peers:         peers,
		Join:          join,
		KnownMembers:  memberIDs(initial),
		ConfChanged:   s.syncPeers,
		MemberName:    s.memberName,
		Logger:        s.log,
	}
	rc.SnapshotCount, rc.CatchUpEntries = s.cfg.SnapshotCount, s.cfg.CatchUpEntries
	if s.transport != nil {
		rc.Transport = s.transport
	}
	s.node, err = raftnode.New(rc)
	if err != nil {
		return err
	}
	if s.transport != nil {
		s.transport.SetRaft(contactRecorder{Raft: s.node, t: &s.contacts})
		if err := s.startPeerServer(); err != nil {
			return err
		}
		for _, m := range initial {
			s.transport.AddPeer(m.GetId(), m.GetPeerUrl())
		}
		s.syncPeers()
	}
	s.startWatch()
	s.node.Run()
	s.nodeRunning = true
	return nil
}

func (s *Server) metaUint(name string) (uint64, error) {
	b, ok, err := s.store.Meta(name)
	if err != nil {
		return 0, err
	}
	if !ok || len(b) != 8 {
		return 0, fmt.Errorf("data dir %s has raft state but no %s: not a DKV data dir?", s.cfg.DataDir, name)
	}
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v, nil
}

func (s *Server) setMetaUint(name string, v uint64) error {
	b := make([]byte, 8)
	for i := 7; i >= 0; i-- {
		b[i] = byte(v)
		v >>= 8
	}
	return s.store.SetMeta(name, b)
}

// MemberID is this node's raft id.
func (s *Server) MemberID() uint64 { return s.memberID }
