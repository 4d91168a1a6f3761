package etcdapi

import (
	"context"
	"errors"
	"strings"

	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/raftnode"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// etcdPrefix starts every error message etcd's server sends; clientv3
// turns such statuses back into its rpctypes errors by their text.
const etcdPrefix = "etcdserver: "

// toEtcdErr turns what DKV's services return (a dkverr.Error, a gRPC
// status carrying one, a context error) into the error an etcd client
// expects: one of etcd's own rpctypes statuses where etcd has one for the
// case (compacted, future revision, lease not found, no space, no leader,
// auth), otherwise a status with DKV's gRPC code and DKV's message behind
// etcd's "etcdserver: " prefix, so a client sees why (a lock that refused
// a write is named). An error that already is etcd's passes unchanged.
func toEtcdErr(err error) error {
	if err == nil {
		return nil
	}
	if st, ok := status.FromError(err); ok && strings.HasPrefix(st.Message(), etcdPrefix) {
		return err // etcd's own already
	}
	if errors.Is(err, raftnode.ErrUnknownOutcome) {
		return rpctypes.ErrGRPCTimeout // the write may or may not have applied
	}
	var de *dkverr.Error
	if !errors.As(dkverr.FromGRPC(err), &de) {
		switch {
		case errors.Is(err, context.Canceled):
			return rpctypes.ErrGRPCCanceled
		case errors.Is(err, context.DeadlineExceeded):
			return rpctypes.ErrGRPCDeadlineExceeded
		}
		st, ok := status.FromError(err)
		switch {
		case !ok:
			return status.Error(codes.Unknown, etcdPrefix+err.Error())
		case st.Code() == codes.Canceled:
			return rpctypes.ErrGRPCCanceled
		case st.Code() == codes.DeadlineExceeded:
			return rpctypes.ErrGRPCTimeout
		}
		return status.Error(st.Code(), etcdPrefix+st.Message())
	}
	msg := de.Msg
	switch de.Code {
	case dkverr.Compacted:
		return rpctypes.ErrGRPCCompacted
	case dkverr.LeaseNotFound:
		return rpctypes.ErrGRPCLeaseNotFound
	case dkverr.NoSpace:
		return rpctypes.ErrGRPCNoSpace
	case dkverr.PermissionDenied:
		return rpctypes.ErrGRPCPermissionDenied
	case dkverr.Unauthenticated:
		switch {
		case strings.Contains(msg, "carries no token"):
			return rpctypes.ErrGRPCUserEmpty
		case strings.Contains(msg, "password"):
			return rpctypes.ErrGRPCAuthFailed
		}
		return rpctypes.ErrGRPCInvalidAuthToken
	case dkverr.Unavailable:
		if strings.Contains(msg, "no leader") {
			return rpctypes.ErrGRPCNoLeader
		}
	case dkverr.Conflict:
		if strings.HasPrefix(msg, "lease ") && strings.HasSuffix(msg, " already exists") {
			return rpctypes.ErrGRPCLeaseExist
		}
	case dkverr.InvalidInput:
		switch {
		case strings.Contains(msg, "is in the future"):
			return rpctypes.ErrGRPCFutureRev
		case strings.Contains(msg, "key is empty"):
			return rpctypes.ErrGRPCEmptyKey
		case strings.Contains(msg, "twice") || strings.Contains(msg, "both puts and deletes"):
			return rpctypes.ErrGRPCDuplicateKey
		case strings.Contains(msg, "needs an existing key"):
			return rpctypes.ErrGRPCKeyNotFound
		}
	}
	return status.Error(de.Code.GRPCCode(), etcdPrefix+msg)
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
