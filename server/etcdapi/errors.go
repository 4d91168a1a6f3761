package etcdapi

import (
	"errors"
	"strings"

	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/etcderr"
	"github.com/dkv-io/dkv/internal/raftnode"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// etcdPrefix starts every error message etcd's server sends.
const etcdPrefix = etcderr.Prefix

// toEtcdErr is etcderr.FromDKV, with a write whose outcome is unknown
// answered as etcd answers a request that timed out.
func toEtcdErr(err error) error {
	if errors.Is(err, raftnode.ErrUnknownOutcome) && !etcderr.IsEtcd(err) {
		return rpctypes.ErrGRPCTimeout // the write may or may not have applied
	}
	return etcderr.FromDKV(err)
}

// DKVCode is the DKV code an error this package returned stands for, for
// the server's metrics, which count calls by DKV code: etcd's statuses
// carry no DKV detail, so the code comes from the gRPC code (and, for the
// codes DKV uses twice, the message).
func DKVCode(err error) dkverr.Code {
	if err == nil {
		return dkverr.OK
	}
	if c := dkverr.CodeOf(err); c != dkverr.Internal {
		return c
	}
	st, ok := status.FromError(err)
	if !ok {
		return dkverr.Internal
	}
	switch st.Code() {
	case codes.InvalidArgument:
		return dkverr.InvalidInput
	case codes.NotFound:
		if st.Message() == rpctypes.ErrorDesc(rpctypes.ErrGRPCLeaseNotFound) {
			return dkverr.LeaseNotFound
		}
		return dkverr.NotFound
	case codes.OutOfRange:
		if st.Message() == rpctypes.ErrorDesc(rpctypes.ErrGRPCCompacted) {
			return dkverr.Compacted
		}
		return dkverr.InvalidInput
	case codes.Aborted:
		return dkverr.Conflict
	case codes.FailedPrecondition:
		if strings.Contains(st.Message(), "locked") || strings.Contains(st.Message(), "lock handle") {
			return dkverr.Locked
		}
		return dkverr.Conflict
	case codes.ResourceExhausted:
		if strings.Contains(st.Message(), "too many failed logins") {
			return dkverr.Throttled
		}
		return dkverr.NoSpace
	case codes.Unauthenticated:
		return dkverr.Unauthenticated
	case codes.PermissionDenied:
		return dkverr.PermissionDenied
	case codes.Unavailable, codes.Canceled, codes.DeadlineExceeded:
		return dkverr.Unavailable
	}
	return dkverr.Internal
}
