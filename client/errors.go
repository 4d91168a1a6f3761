package client

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/dkv-io/dkv/internal/dkverr"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinel errors. Every error a Client returns for a DKV status matches
// exactly one of them with errors.Is.
var (
	// ErrNotFound: the key (Get) or the member does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: a condition did not hold (IfAbsent, IfVersion,
	// IfModRevision, a counter bound); nothing was written.
	ErrConflict = errors.New("conflict")
	// ErrInvalidInput: the request was malformed or over a limit (empty or
	// oversized key, oversized value or txn, bad range). The message says
	// what and which limit.
	ErrInvalidInput = errors.New("invalid input")
	// ErrLocked: the key is locked and the write did not carry the current
	// lock handle.
	ErrLocked = errors.New("locked")
	// ErrLeaseNotFound: the lease does not exist (never granted, revoked or
	// expired).
	ErrLeaseNotFound = errors.New("lease not found")
	// ErrUnavailable: the store could not serve the request (no reachable
	// endpoint, no leader, no quorum, shutting down). A write failing with
	// ErrUnavailable (and not ErrUnknownOutcome) was not applied.
	ErrUnavailable = errors.New("unavailable")
	// ErrCompacted: the requested revision has been compacted away.
	ErrCompacted = errors.New("revision compacted")
	// ErrUnknownOutcome: a write was sent but its result was lost (the
	// connection broke, or ctx expired, before the reply). It may or may not
	// have been applied. The error wraps the cause, so errors.Is(err,
	// context.DeadlineExceeded) also works. It never also matches
	// ErrUnavailable: retrying a write blindly on ErrUnknownOutcome can apply
	// it twice.
	ErrUnknownOutcome = errors.New("outcome unknown: the write may or may not have been applied")
	// ErrInternal: the server failed (a bug or an I/O error).
	ErrInternal = errors.New("internal server error")
	// ErrNoSpace: a member's disk is nearly full or the database is over
	// its quota (--quota-bytes), and the cluster refuses writes that add
	// data; nothing was written. Reads, deletes, lease revokes and
	// compaction still work; writes resume by themselves once space is
	// freed. The message names the member and the reason.
	ErrNoSpace = errors.New("no space")
	// ErrUnauthenticated: auth is enabled and the call carried no valid
	// token (none, expired, or issued before the user's last change), or
	// Authenticate was given a wrong password. A client with
	// Config.Username re-authenticates once by itself before returning it.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrPermissionDenied: the user's roles do not allow the call; the
	// message names the permission and the key range that was missing.
	ErrPermissionDenied = errors.New("permission denied")
	// ErrNoIndex: a label query has no index to serve it; the message
	// names the index to create (or ask for a scan, WithQueryScan).
	ErrNoIndex = errors.New("no index for query")
	// ErrThrottled: too many failed logins for this user from this
	// address, or from this address; the message names the wait, and
	// Error.Metadata["retry_after_ms"] carries it. Nothing was checked:
	// retry after the wait (a correct password does not skip it).
	ErrThrottled = errors.New("throttled")
	// ErrSessionExpired: a write was sent in a client session the
	// cluster no longer knows (unused for longer than Config.SessionTTL,
	// for one); it was not applied. The client opens a new session and
	// sends the write again by itself, so a caller sees this only wrapped
	// in ErrUnknownOutcome: an earlier attempt of the same write, whose
	// outcome was unknown, may have applied before the session expired.
	ErrSessionExpired = errors.New("session expired")
)

// codeErrors is the one table from wire status codes to client errors.
var codeErrors = map[dkverr.Code]error{
	dkverr.NotFound:         ErrNotFound,
	dkverr.Conflict:         ErrConflict,
	dkverr.InvalidInput:     ErrInvalidInput,
	dkverr.Locked:           ErrLocked,
	dkverr.LeaseNotFound:    ErrLeaseNotFound,
	dkverr.Unavailable:      ErrUnavailable,
	dkverr.Compacted:        ErrCompacted,
	dkverr.Internal:         ErrInternal,
	dkverr.NoSpace:          ErrNoSpace,
	dkverr.Unauthenticated:  ErrUnauthenticated,
	dkverr.PermissionDenied: ErrPermissionDenied,
	dkverr.NoIndex:          ErrNoIndex,
	dkverr.Throttled:        ErrThrottled,
	dkverr.SessionExpired:   ErrSessionExpired,
}

// Error is a failure with a DKV status. errors.Is(err, Kind) holds, so
// callers normally match the sentinels rather than this type; use
// errors.As to read the server's message or metadata.
type Error struct {
	// Kind is the sentinel: ErrNotFound, ErrConflict, ...
	Kind error
	// Msg is the human-readable detail, usually the server's message.
	Msg string
	// Metadata is structured detail from the server, e.g.
	// "compact_revision" for ErrCompacted.
	Metadata map[string]string
}

func (e *Error) Error() string {
	if e.Msg == "" {
		return e.Kind.Error()
	}
	if strings.Contains(e.Msg, kindPhrase(e.Kind)) {
		// The message already says what kind of failure it is (`key "x"
		// not found`): "not found: " in front would only repeat it.
		return e.Msg
	}
	return e.Kind.Error() + ": " + e.Msg
}

// kindPhrase is the words of a sentinel that a message repeating it
// contains: "not found" for both NotFound and LeaseNotFound, "compacted"
// for "revision compacted".
func kindPhrase(kind error) string {
	switch kind {
	case ErrLeaseNotFound:
		return "not found"
	case ErrCompacted:
		return "compacted"
	}
	return kind.Error()
}

func (e *Error) Unwrap() error { return e.Kind }

func newError(kind error, format string, args ...any) *Error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

// failure classifies one failed RPC attempt.
type failure struct {
	err   error
	class errClass
}

// classify turns the error of one RPC attempt into a client error and
// its class for the retry policy (retry.go). sent reports whether the
// request reached a transport; write whether it was a mutation.
func classify(ctx context.Context, err error, sent, write bool) failure {
	if err == nil {
		return failure{}
	}
	st, ok := status.FromError(err)
	if !ok {
		if ctx.Err() != nil && write && sent {
			return failure{err: fmt.Errorf("%w: %w", ErrUnknownOutcome, ctx.Err()), class: classUnknown}
		}
		return failure{err: err, class: classBroken}
	}
	if hasDKVDetail(st) {
		var de *dkverr.Error
		if errors.As(dkverr.FromGRPC(err), &de) {
			kind, ok := codeErrors[de.Code]
			if !ok {
				kind = ErrInternal
			}
			e := &Error{Kind: kind, Msg: de.Msg, Metadata: de.Metadata}
			switch de.Code {
			case dkverr.Unavailable:
				// The server refused with Unavailable: it did not apply.
				return failure{err: e, class: classRefused}
			case dkverr.Internal:
				return failure{err: e, class: classBroken}
			}
			return failure{err: e, class: classFinal}
		}
	}
	switch st.Code() {
	case codes.Unavailable:
		if write && sent {
			return failure{err: fmt.Errorf("%w: %w", ErrUnknownOutcome, err), class: classUnknown}
		}
		f := failure{err: &Error{Kind: ErrUnavailable, Msg: st.Message()}, class: classUnavailable}
		if !sent {
			f.class = classRefused
		}
		return f
	case codes.DeadlineExceeded, codes.Canceled:
		// The deadline may fire on the server's side first; report it as
		// the context error either way so errors.Is works.
		cause := ctx.Err()
		if cause == nil {
			base := context.DeadlineExceeded
			if st.Code() == codes.Canceled {
				base = context.Canceled
			}
			cause = base
			if msg := st.Message(); msg != "" && msg != base.Error() {
				cause = fmt.Errorf("%w (%s)", base, msg)
			}
		}
		if write && sent {
			return failure{err: fmt.Errorf("%w: %w", ErrUnknownOutcome, cause), class: classUnknown}
		}
		return failure{err: cause, class: classBroken}
	case codes.InvalidArgument:
		// Without a DKV detail these come from gRPC itself, e.g. a
		// message over the transport's size limit.
		return failure{err: &Error{Kind: ErrInvalidInput, Msg: st.Message()}}
	case codes.ResourceExhausted:
		return failure{err: &Error{Kind: ErrInvalidInput, Msg: st.Message()}, class: classBroken}
	case codes.Internal, codes.Unknown, codes.DataLoss:
		if write && sent {
			return failure{err: fmt.Errorf("%w: %w", ErrUnknownOutcome, err), class: classUnknown}
		}
		return failure{err: &Error{Kind: ErrInternal, Msg: st.Message()}, class: classBroken}
	case codes.Unimplemented, codes.PermissionDenied, codes.Unauthenticated, codes.OutOfRange:
		return failure{err: err}
	}
	return failure{err: err, class: classBroken}
}

func hasDKVDetail(st *status.Status) bool {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == dkverr.Domain {
			return true
		}
	}
	return false
}
