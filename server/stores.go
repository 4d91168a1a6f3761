package server

import (
	"context"
	"strings"

	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/state"
	"github.com/dkv-io/dkv/internal/storekeys"
	"github.com/dkv-io/dkv/server/etcdapi"
	"google.golang.org/grpc/metadata"
)

// Named stores (docs/data-model.md; the Store service is in
// grpcapi/stores.go). A call names its store in the gRPC metadata
// storeHeader; the server maps every key of the request into that store's
// part of the keyspace (internal/storekeys) before auth checks it, and
// strips it from the reply after, so a client can name no key outside its
// store. The HTTP gateway takes ?store= or a Dkv-Store header.

// storeHeader is the gRPC metadata key naming a call's store; the etcd
// lock and election services pass it on to their calls back into this
// server.
const storeHeader = etcdapi.StoreMetadata

// storeOf is the Mapper of the store ctx's call names; a named store must
// exist. A store this member does not know yet may have been created on
// another member a moment ago: it waits for a linearizable read before
// refusing. Writes check the store again where it matters, at apply.
func (s *Server) storeOf(ctx context.Context) (storekeys.Mapper, error) {
	name := ""
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(storeHeader); len(v) > 0 {
			name = v[0]
		}
	}
	m, err := storekeys.For(name)
	if err != nil || m.Default() {
		return m, err
	}
	for waited := false; ; waited = true {
		_, ok, err := s.applied().Latest().Store(name)
		if err != nil {
			return m, dkverr.New(dkverr.Internal, "reading store %q: %v", name, err)
		}
		if ok {
			return m, nil
		}
		if waited {
			return m, state.NotExistError(name)
		}
		if err := s.node.WaitLinearizable(ctx); err != nil {
			return m, err
		}
	}
}

// storeAgnostic are the services whose calls name no key: they run the
// same in every store.
//
// The Query service names keys, but inside its query text; its handlers
// map the text's prefix into the call's store themselves
// (grpcapi/query.go), and check permissions on the mapped keys.
var storeAgnostic = []string{"/dkv.v1.KV/SessionOpen", "/dkv.v1.Cluster/", "/dkv.v1.Maintenance/", "/dkv.v1.Auth/", "/dkv.v1.Store/", "/dkv.v1.Lease/", "/dkv.v1.Query/"}

// storeRequest maps req into ctx's store; the returned Mapper strips the
// reply.
func (s *Server) storeRequest(ctx context.Context, method string, req any) (storekeys.Mapper, error) {
	m, err := s.storeOf(ctx)
	if err != nil {
		return m, err
	}
	known, err := m.Request(req)
	if err != nil || known || m.Default() {
		return m, err
	}
	for _, p := range storeAgnostic {
		if strings.HasPrefix(method, p) {
			return m, nil
		}
	}
	// Nothing is reachable by omission: a keyed call this table does not
	// know is refused rather than run in the default store.
	return m, dkverr.New(dkverr.InvalidInput, "%s is not available in a named store (store %q)", method, m.Name())
}
