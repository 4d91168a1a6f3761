package grpcapi

import (
	"context"
	"io"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/auth"
)

// Admin is what the Cluster, Maintenance and Auth services need of the
// node beyond Node: operations on the member itself, which only the node
// can carry out (raft membership and leadership, its database, alarms,
// the login guard, auth changes). The services validate, map and answer;
// the work is the node's.
type Admin interface {
	// Status is this member's identity and raft status now.
	Status() MemberStatus
	// Storage is what this member's database holds and takes now.
	Storage() StorageStatus
	// HashKV is this member's HashKV at rev (0: the latest), with the
	// state hash and applied index of the same point in time.
	HashKV(rev int64) (*dkvpb.HashKVResponse, error)
	// WithReachability returns copies of ms with each member's
	// reachability as this member sees it.
	WithReachability(ms []*dkvpb.Member) []*dkvpb.Member

	// LeaderCluster is a Cluster client on the leader's client URL that
	// passes the caller's credentials on, and the func that closes it:
	// membership calls need leader-only knowledge (progress, who is
	// active), so a follower forwards them.
	LeaderCluster(ctx context.Context) (dkvpb.ClusterClient, func(), error)
	// AddMember proposes adding a member (a learner if learner) and
	// returns its record once the change is applied.
	AddMember(ctx context.Context, name, peerURL string, learner bool) (*dkvpb.Member, error)
	// PromoteMember proposes making learner m a voter, refusing with
	// Conflict a learner that has not caught up with the leader.
	PromoteMember(ctx context.Context, m *dkvpb.Member) error
	// RemoveMember proposes removing m, refusing with Conflict a voter
	// whose removal would leave no reachable quorum. self reports that
	// this leader removed itself and raft stepped it down.
	RemoveMember(ctx context.Context, m *dkvpb.Member) (self bool, err error)
	// TransferLeader hands the leadership to member id.
	TransferLeader(ctx context.Context, id uint64) error

	// Snapshot takes a consistent copy of this member's database and
	// opens it as a tar archive.
	Snapshot() (*Archive, error)
	// Alarms lists the raised alarms.
	Alarms() []*dkvpb.AlarmMember
	// DisarmAlarm clears alarm a through raft, on an operator's request.
	DisarmAlarm(ctx context.Context, a *dkvpb.AlarmMember) error
	// Defragment gives back the space of deleted and compacted-away
	// data, one run at a time per process.
	Defragment(ctx context.Context) (Defragmented, error)

	// Login checks name's password against v under the guard that
	// throttles failed logins, and returns the user.
	Login(ctx context.Context, v *auth.View, name, password string) (*auth.User, error)
	// ChangeAuth replicates an auth change (what names the call, for
	// the audit log) and returns its response with the header complete.
	ChangeAuth(ctx context.Context, what string, ch *dkvpb.AuthChange) (*dkvpb.AuthResponse, error)
}

// MemberStatus is a member's identity and raft status.
type MemberStatus struct {
	MemberID, ClusterID uint64
	// Lead is the leader's id (0: none known).
	Lead                  uint64
	Term, Commit, Applied uint64
	IsLeader, IsLearner   bool
}

// StorageStatus is what a member's database holds and takes on disk.
type StorageStatus struct {
	// Revision and CompactRevision are the applied ones, as response
	// headers report them.
	Revision, CompactRevision int64
	// DBSize is what the quota compares; DBInUse what the live files
	// take.
	DBSize, DBInUse int64
}

// Archive is a consistent copy of a member's database as a tar stream,
// and what it holds. Close ends the stream and removes the copy.
type Archive struct {
	io.ReadCloser
	// Size is the tar's size, roughly.
	Size                      int64
	Revision, CompactRevision int64
	AppliedIndex              uint64
	KeyCount                  int64
}

// Defragmented is what a defragmentation did.
type Defragmented struct {
	Before, After int64
	Took          time.Duration
}
