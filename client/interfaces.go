package client

import (
	"context"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
)

// The client's API as interfaces, one per area, as etcd's client/v3 has
// them. *Client satisfies each; code that takes the narrowest one it
// needs works with a wrapper (a key namespace, metrics, retries of its
// own) or a test double as well. KV is in kv.go.

// Watcher watches keys. See Client.WatchKey for the guarantees.
type Watcher interface {
	// WatchKey watches key, or a range with WithPrefix / WithRange.
	WatchKey(ctx context.Context, key string, opts ...WatchOption) (*Watch, error)
	// WatchPrefix watches every key starting with prefix.
	WatchPrefix(ctx context.Context, prefix string, opts ...WatchOption) (*Watch, error)
	// OnChange calls fn for every change under prefix until ctx ends or
	// the watch fails.
	OnChange(ctx context.Context, prefix string, fn func(WatchEvent), opts ...WatchOption) error
}

// Lease grants, renews and revokes leases.
type Lease interface {
	// Grant creates a lease with the given TTL.
	Grant(ctx context.Context, ttl time.Duration, opts ...LeaseOption) (*LeaseGrant, error)
	// Revoke ends a lease now and deletes its keys.
	Revoke(ctx context.Context, id int64) error
	// KeepAliveOnce renews a lease to its full TTL once.
	KeepAliveOnce(ctx context.Context, id int64) (time.Duration, error)
	// KeepAlive keeps a lease alive in the background until ctx ends; the
	// channel reports its loss.
	KeepAlive(ctx context.Context, id int64) (<-chan error, error)
	// TimeToLive reports a lease's granted and remaining TTL.
	TimeToLive(ctx context.Context, id int64, opts ...LeaseOption) (*LeaseInfo, error)
	// Leases lists every lease.
	Leases(ctx context.Context) ([]LeaseStatus, error)
}

// Locker takes and releases store-enforced locks.
type Locker interface {
	// TryAcquire takes key's lock if it is free, without waiting.
	TryAcquire(ctx context.Context, key string, ttl time.Duration, opts ...LockOption) (*LockResult, error)
	// Acquire takes key's lock, waiting in its FIFO queue until granted
	// or ctx ends.
	Acquire(ctx context.Context, key string, ttl time.Duration, opts ...LockOption) (LockHandle, error)
	// Release gives a lock up.
	Release(ctx context.Context, h LockHandle) error
	// DescribeLock reports key's holder and queue.
	DescribeLock(ctx context.Context, key string) (*LockInfo, error)
	// Renew extends a lock with its own lease to its full TTL.
	Renew(ctx context.Context, h LockHandle) (time.Duration, error)
}

// Cluster reads and changes the cluster's membership and asks members
// about themselves.
type Cluster interface {
	// MemberList lists the members.
	MemberList(ctx context.Context, opts ...OpOption) (*dkvpb.MemberListResponse, error)
	// MemberAdd adds a member, as a learner or a voter.
	MemberAdd(ctx context.Context, name, peerURL string, asLearner bool) (*dkvpb.MemberAddResponse, error)
	// MemberPromote makes a learner a voter.
	MemberPromote(ctx context.Context, name string) (*dkvpb.MemberPromoteResponse, error)
	// MemberRemove removes a member.
	MemberRemove(ctx context.Context, name string) (*dkvpb.MemberRemoveResponse, error)
	// LeaderTransfer moves leadership to the named voter.
	LeaderTransfer(ctx context.Context, name string) (*dkvpb.LeaderTransferResponse, error)
	// Status reports the status of the member that served the call.
	Status(ctx context.Context) (*dkvpb.StatusResponse, error)
	// HashKV hashes the serving member's keyspace at a revision.
	HashKV(ctx context.Context, rev int64) (*dkvpb.HashKVResponse, error)
}

var (
	_ KV      = (*Client)(nil)
	_ Watcher = (*Client)(nil)
	_ Lease   = (*Client)(nil)
	_ Locker  = (*Client)(nil)
	_ Cluster = (*Client)(nil)
)
