// Package dkverr defines DKV's status codes and the one error type that
// carries them from the state machine, through the server, over the wire
// (as a gRPC status with a google.rpc.ErrorInfo detail), back into the Go
// client. Every layer uses this package so that one table maps the codes.
package dkverr

import (
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Code is the outcome of an operation. docs/client.md ("Errors") lists the
// Go client's sentinel for each, docs/cli.md ("Exit codes") the CLI's.
type Code int

const (
	OK Code = iota
	NotFound
	Conflict
	InvalidInput
	Locked
	LeaseNotFound
	Unavailable
	Compacted
	// Internal is a bug or an I/O failure on the server.
	Internal
	// NoSpace: a member's disk is (nearly) full or its database is over
	// --quota-bytes; writes that add data are refused until space is
	// freed, while reads, deletes and compaction still work.
	NoSpace
	// Unauthenticated: auth is enabled and the call carried no valid
	// token (missing, malformed, expired, or older than the user's last
	// auth change) or a wrong password.
	Unauthenticated
	// PermissionDenied: the caller's roles do not allow the call; the
	// message names the permission and key range that was missing.
	PermissionDenied
	// NoIndex: a label query has no index to serve it (and did not ask
	// to scan); the message names the index to create.
	NoIndex
	// Throttled: the caller tried too often and failed (wrong
	// passwords); the message names the wait, and metadata
	// "retry_after_ms" carries it.
	Throttled
	// SessionExpired: a write named a client session that is unknown,
	// expired (unused for longer than its TTL) or another user's; it was
	// not applied. The Go client opens a new session and sends the write
	// again unless an earlier attempt of it may have applied.
	SessionExpired
)

// NumCodes is the number of codes, for tables indexed by Code; a new
// code goes before it in the list above and moves it.
const NumCodes = int(SessionExpired) + 1

// Domain is the ErrorInfo domain DKV errors carry on the wire.
const Domain = "dkv.io"

var codeInfo = []struct {
	name   string
	reason string
	grpc   codes.Code
}{
	OK:               {"OK", "OK", codes.OK},
	NotFound:         {"NotFound", "NOT_FOUND", codes.NotFound},
	Conflict:         {"Conflict", "CONFLICT", codes.Aborted},
	InvalidInput:     {"InvalidInput", "INVALID_INPUT", codes.InvalidArgument},
	Locked:           {"Locked", "LOCKED", codes.FailedPrecondition},
	LeaseNotFound:    {"LeaseNotFound", "LEASE_NOT_FOUND", codes.NotFound},
	Unavailable:      {"Unavailable", "UNAVAILABLE", codes.Unavailable},
	Compacted:        {"Compacted", "COMPACTED", codes.OutOfRange},
	Internal:         {"Internal", "INTERNAL", codes.Internal},
	NoSpace:          {"NoSpace", "NO_SPACE", codes.ResourceExhausted},
	Unauthenticated:  {"Unauthenticated", "UNAUTHENTICATED", codes.Unauthenticated},
	PermissionDenied: {"PermissionDenied", "PERMISSION_DENIED", codes.PermissionDenied},
	NoIndex:          {"NoIndex", "NO_INDEX", codes.FailedPrecondition},
	Throttled:        {"Throttled", "THROTTLED", codes.ResourceExhausted},
	SessionExpired:   {"SessionExpired", "SESSION_EXPIRED", codes.FailedPrecondition},
}

func (c Code) String() string {
	if c < 0 || int(c) >= len(codeInfo) {
		return fmt.Sprintf("Code(%d)", int(c))
	}
	return codeInfo[c].name
}

// Reason is the machine-readable ErrorInfo reason for c.
func (c Code) Reason() string {
	if c < 0 || int(c) >= len(codeInfo) {
		return "UNKNOWN"
	}
	return codeInfo[c].reason
}

// GRPCCode is the gRPC status code c travels as.
func (c Code) GRPCCode() codes.Code {
	if c < 0 || int(c) >= len(codeInfo) {
		return codes.Unknown
	}
	return codeInfo[c].grpc
}

// Error is a DKV failure with its status code.
type Error struct {
	Code Code
	Msg  string
	// Metadata carries structured detail, e.g. "compact_revision" for
	// Compacted.
	Metadata map[string]string
}

func (e *Error) Error() string { return e.Code.String() + ": " + e.Msg }

// Is makes errors.Is(err, &Error{Code: c}) match any error with code c,
// which is how the client's sentinels work.
func (e *Error) Is(target error) bool {
	var t *Error
	if errors.As(target, &t) {
		return t.Code == e.Code && (t.Msg == "" || t.Msg == e.Msg)
	}
	return false
}

// GRPCStatus lets grpc-go send e as a status with an ErrorInfo detail.
func (e *Error) GRPCStatus() *status.Status {
	st := status.New(e.Code.GRPCCode(), e.Msg)
	if ds, err := st.WithDetails(&errdetails.ErrorInfo{
		Reason:   e.Code.Reason(),
		Domain:   Domain,
		Metadata: e.Metadata,
	}); err == nil {
		return ds
	}
	return st
}

// Message is err's text without the code in front: the Msg of a DKV
// error, err.Error() otherwise. Use it where the code travels separately
// (a status field, a gRPC code) so that the code is not printed twice
// ("Compacted: Compacted: ...").
func Message(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Msg
	}
	return err.Error()
}

// New returns an error with code c and a formatted message.
func New(c Code, format string, args ...any) *Error {
	return &Error{Code: c, Msg: fmt.Sprintf(format, args...)}
}

// ErrDamaged is matched (errors.Is) by every report that a member's
// durable data is damaged or lost (storage's *DamageError). It is a local
// failure with no code on the wire; it is here, beside the codes, so that
// the CLI maps it to its exit code without linking the storage engine.
var ErrDamaged = errors.New("data damaged")

// Sentinel returns a message-less error with code c, for errors.Is.
func Sentinel(c Code) *Error { return &Error{Code: c} }

// CodeOf returns the DKV code of err: OK for nil, the code of a wrapped
// *Error, the code decoded from a gRPC status, or Internal.
func CodeOf(err error) Code {
	if err == nil {
		return OK
	}
	var e *Error
	if errors.As(FromGRPC(err), &e) {
		return e.Code
	}
	return Internal
}

// FromGRPC turns a gRPC status error carrying a DKV ErrorInfo back into an
// *Error. gRPC errors without one (transport failures, other servers) map
// by gRPC code: InvalidArgument becomes InvalidInput and Unavailable
// becomes Unavailable (whether the operation applied is unknown).
// DeadlineExceeded and every other error are returned unchanged.
func FromGRPC(err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.Domain != Domain {
			continue
		}
		for c := range codeInfo {
			if codeInfo[c].reason == info.Reason {
				return &Error{Code: Code(c), Msg: st.Message(), Metadata: info.Metadata}
			}
		}
	}
	switch st.Code() {
	case codes.InvalidArgument:
		return &Error{Code: InvalidInput, Msg: st.Message()}
	case codes.Unavailable:
		return &Error{Code: Unavailable, Msg: st.Message()}
	}
	return err
}

// CodeForReason is the code whose Reason is r (a watch's cancel_status).
func CodeForReason(r string) (Code, bool) {
	for c := range codeInfo {
		if codeInfo[c].reason == r {
			return Code(c), true
		}
	}
	return OK, false
}
