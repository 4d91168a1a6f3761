package httpapi

import (
	"context"
	"net/http"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/auth"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/state"
	"github.com/dkv-io/dkv/internal/storekeys"
	"google.golang.org/grpc"
)

// Node is what the endpoints need from the node serving them.
type Node interface {
	// RequestContext is r's context with its credentials (the
	// Authorization header) as incoming gRPC metadata.
	RequestContext(r *http.Request) context.Context
	// RequestStore is RequestContext with r's store (?store= or the
	// Dkv-Store header) added, and that store's key Mapper.
	RequestStore(r *http.Request) (context.Context, storekeys.Mapper, error)
	// Authorize checks that ctx's caller may make the DKV call method
	// with req, as the gRPC interceptors would, and returns ctx carrying
	// the caller, for a handler called directly.
	Authorize(ctx context.Context, method string, req any) (context.Context, error)
	// KV is the node's KV service, called directly by the plain-value
	// endpoint (after Authorize).
	KV() dkvpb.KVServer
	// AuthView is the replicated auth state; Caller is ctx's user under
	// it (nil while auth is off).
	AuthView() *auth.View
	Caller(ctx context.Context, v *auth.View) (*auth.User, error)
	// WireError is err as the node answers it on the wire.
	WireError(err error) error

	// WaitLinearizable returns once this member has applied every write
	// acknowledged before the call.
	WaitLinearizable(ctx context.Context) error
	// Applied reads the applied state.
	Applied() state.Reader
	// Revision is the store revision applied so far.
	Revision() int64
	// LeaseRemaining is how long lease id has left, if this member
	// tracks it.
	LeaseRemaining(id int64) (time.Duration, bool)

	// MemberID is this member's id.
	MemberID() uint64
	// Progress is each member's replication progress, when this member
	// leads (leader false otherwise), with the leader's own match index
	// as last.
	Progress(ctx context.Context) (leader bool, last uint64, ps []Progress, err error)
	// MemberStatus is member m's status, asked of m.
	MemberStatus(ctx context.Context, m *dkvpb.Member) (*dkvpb.StatusResponse, error)
}

// Progress is one member's replication progress as the leader sees it.
type Progress struct {
	ID        uint64
	Match     uint64
	Learner   bool
	Active    bool // recently active, or the leader itself
	Replicate bool // in raft's replicate state
}

// API serves the endpoints over a Node.
type API struct {
	n    Node
	conn *grpc.ClientConn // the gateway's in-process connection (Handler)
	o    Options
}

// New is the API over n.
func New(n Node) *API { return &API{n: n} }

// Error answers err with its HTTP status (Status) and its DKV code in
// X-Dkv-Status.
func Error(w http.ResponseWriter, err error) {
	code := dkverr.CodeOf(err)
	st := Status[code]
	if st == 0 {
		st = http.StatusInternalServerError
	}
	w.Header().Set("X-Dkv-Status", code.Reason())
	http.Error(w, err.Error(), st)
}

// Status is the HTTP status of each DKV outcome, on every HTTP path
// (the plain /v1/keys/ endpoint and the JSON gateway alike): gRPC's own
// mapping would answer Conflict and Locked, both FailedPrecondition on the
// wire, with 400, which tells a client its request was malformed.
var Status = map[dkverr.Code]int{
	dkverr.NotFound: 404, dkverr.Conflict: 409, dkverr.InvalidInput: 400,
	dkverr.Locked: 423, dkverr.LeaseNotFound: 404, dkverr.Unavailable: 503,
	dkverr.Compacted: 410, dkverr.NoSpace: 507,
	dkverr.Unauthenticated: 401, dkverr.PermissionDenied: 403,
	dkverr.NoIndex: 412, dkverr.Throttled: 429, dkverr.SessionExpired: 412,
}
