// Package etcderr turns DKV's errors into the ones an etcd client
// expects. The members' etcd API (server/etcdapi) and dkv proxy's etcd
// Watch (internal/proxy), which may not link the server, share it.
package etcderr

import (
	"context"
	"errors"
	"strings"

	"github.com/dkv-io/dkv/internal/dkverr"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Prefix starts every error message etcd's server sends; clientv3 turns
// such statuses back into its rpctypes errors by their text.
const Prefix = "etcdserver: "

// IsEtcd reports whether err is already a status in etcd's words.
func IsEtcd(err error) bool {
	st, ok := status.FromError(err)
	return ok && err != nil && strings.HasPrefix(st.Message(), Prefix)
}

// FromDKV turns what DKV's services return (a dkverr.Error, a gRPC
// status carrying one, a context error) into the error an etcd client
// expects: one of etcd's own rpctypes statuses where etcd has one for the
// case (compacted, future revision, lease not found, no space, no leader,
// auth), otherwise a status with DKV's gRPC code and DKV's message behind
// etcd's "etcdserver: " prefix, so a client sees why (a lock that refused
// a write is named). An error that already is etcd's passes unchanged.
func FromDKV(err error) error {
	if err == nil {
		return nil
	}
	if IsEtcd(err) {
		return err
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
			return status.Error(codes.Unknown, Prefix+err.Error())
		case st.Code() == codes.Canceled:
			return rpctypes.ErrGRPCCanceled
		case st.Code() == codes.DeadlineExceeded:
			return rpctypes.ErrGRPCTimeout
		}
		return status.Error(st.Code(), Prefix+st.Message())
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
	return status.Error(de.Code.GRPCCode(), Prefix+msg)
}
