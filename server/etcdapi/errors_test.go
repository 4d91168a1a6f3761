package etcdapi

import (
	"context"
	"fmt"
	"testing"

	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/raftnode"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestToEtcdErr: DKV's errors, as the services return them and as they
// travel (a status with DKV's ErrorInfo), become etcd's.
func TestToEtcdErr(t *testing.T) {
	for _, tc := range []struct {
		in       error
		code     codes.Code
		desc     string
		viaGRPC  bool // also check the error as a gRPC status
		sentinel error
	}{
		{in: dkverr.New(dkverr.Compacted, "revision 2 is compacted (compacted up to 3)"), sentinel: rpctypes.ErrGRPCCompacted, viaGRPC: true},
		{in: dkverr.New(dkverr.InvalidInput, "revision 9 is in the future (current 5)"), sentinel: rpctypes.ErrGRPCFutureRev, viaGRPC: true},
		{in: dkverr.New(dkverr.LeaseNotFound, "lease 7 not found"), sentinel: rpctypes.ErrGRPCLeaseNotFound, viaGRPC: true},
		{in: dkverr.New(dkverr.Conflict, "lease 7 already exists"), sentinel: rpctypes.ErrGRPCLeaseExist},
		{in: dkverr.New(dkverr.NoSpace, "database over quota"), sentinel: rpctypes.ErrGRPCNoSpace},
		{in: dkverr.New(dkverr.Unavailable, "node n1 has no leader"), sentinel: rpctypes.ErrGRPCNoLeader, viaGRPC: true},
		{in: dkverr.New(dkverr.PermissionDenied, `user "a" lacks read permission on [b, c)`), sentinel: rpctypes.ErrGRPCPermissionDenied},
		{in: dkverr.New(dkverr.Unauthenticated, "auth is enabled and the call carries no token: ..."), sentinel: rpctypes.ErrGRPCUserEmpty},
		{in: dkverr.New(dkverr.Unauthenticated, "token expired"), sentinel: rpctypes.ErrGRPCInvalidAuthToken},
		{in: dkverr.New(dkverr.InvalidInput, "txn success branch puts key \"a\" twice"), sentinel: rpctypes.ErrGRPCDuplicateKey},
		{in: dkverr.New(dkverr.InvalidInput, "key \"a\" does not exist; ignore_lease needs an existing key"), sentinel: rpctypes.ErrGRPCKeyNotFound},
		{in: fmt.Errorf("propose: %w", raftnode.ErrUnknownOutcome), sentinel: rpctypes.ErrGRPCTimeout},
		{in: context.Canceled, sentinel: rpctypes.ErrGRPCCanceled},
		{in: dkverr.New(dkverr.Locked, `key "jobs/1" is locked (fencing token 3)`), code: codes.FailedPrecondition, desc: `etcdserver: key "jobs/1" is locked (fencing token 3)`, viaGRPC: true},
		{in: dkverr.New(dkverr.InvalidInput, "value is 2000000 bytes; the limit is 1048576"), code: codes.InvalidArgument, desc: "etcdserver: value is 2000000 bytes; the limit is 1048576"},
		{in: rpctypes.ErrGRPCTooManyOps, sentinel: rpctypes.ErrGRPCTooManyOps},
		{in: status.Error(codes.Unavailable, "transport is closing"), code: codes.Unavailable, desc: "etcdserver: transport is closing"},
	} {
		if tc.sentinel != nil {
			tc.code, tc.desc = status.Code(tc.sentinel), rpctypes.ErrorDesc(tc.sentinel)
		}
		ins := []error{tc.in}
		if tc.viaGRPC {
			ins = append(ins, tc.in.(*dkverr.Error).GRPCStatus().Err())
		}
		for _, in := range ins {
			got := toEtcdErr(in)
			if status.Code(got) != tc.code || rpctypes.ErrorDesc(got) != tc.desc {
				t.Errorf("toEtcdErr(%v) = %v, want %v %q", in, got, tc.code, tc.desc)
			}
			if tc.sentinel != nil && rpctypes.Error(got).Error() != rpctypes.Error(tc.sentinel).Error() {
				t.Errorf("toEtcdErr(%v) is not clientv3's %v", in, rpctypes.Error(tc.sentinel))
			}
		}
	}
	if toEtcdErr(nil) != nil {
		t.Error("toEtcdErr(nil) != nil")
	}
}
