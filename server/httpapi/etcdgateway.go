package httpapi

import (
	"context"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.etcd.io/etcd/api/v3/etcdserverpb/gw"
	electiongw "go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb/gw"
	lockgw "go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb/gw"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
)

// etcdGateway is etcd's HTTP/JSON gateway (/v3/kv/range, /v3/watch,
// /v3/lease/grant, ...) over the etcd services, reached through conn,
// the HTTP gateway's in-process connection: JSON with proto field names
// and base64 bytes, as etcd's own gateway speaks.
func etcdGateway(conn *grpc.ClientConn) (*runtime.ServeMux, error) {
	mux := runtime.NewServeMux(append(GatewayOptions(),
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &depthJSONPb{runtime.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: true},
		}}))...)
	bg := context.Background()
	for _, reg := range []func(context.Context, *runtime.ServeMux, *grpc.ClientConn) error{
		gw.RegisterKVHandler, gw.RegisterWatchHandler, gw.RegisterLeaseHandler,
		gw.RegisterClusterHandler, gw.RegisterMaintenanceHandler, gw.RegisterAuthHandler,
		lockgw.RegisterLockHandler, electiongw.RegisterElectionHandler,
	} {
		if err := reg(bg, mux, conn); err != nil {
			return nil, err
		}
	}
	return mux, nil
}
