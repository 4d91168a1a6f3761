package mvcc

import (
	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/lease"
	"google.golang.org/protobuf/proto"
)

// Result is what these tests see of one applied command.
type Result struct {
	Resp     proto.Message
	Err      error
	Events   []Event
	Revision int64
	Leases   []lease.Change
	Locks    []*LockGrant
}

// ApplyCommand and ValidateCommand are package state's command registry,
// set by registry_test.go: that file is package mvcc_test, which may
// import state (this package may not), so these tests apply and validate
// commands through the one production dispatch, never a copy of it.
var (
	ApplyCommand    func(s *Store, b *pebble.Batch, req *dkvpb.InternalRequest) Result
	ValidateCommand func(req *dkvpb.InternalRequest, l Limits) error
)

// Apply applies req to s in b as package state does.
func (s *Store) Apply(b *pebble.Batch, req *dkvpb.InternalRequest) Result {
	return ApplyCommand(s, b, req)
}

// Validate checks req before proposing as package state does.
func Validate(req *dkvpb.InternalRequest, l Limits) error { return ValidateCommand(req, l) }
