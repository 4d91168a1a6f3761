package proxy

import (
	"context"
	"io"
	"slices"
	"strings"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// passMD is the metadata of an incoming call that goes upstream: all of
// it but the transport's own headers, which gRPC sets again on the way
// out (the deadline travels as the context's).
func passMD(ctx context.Context) metadata.MD {
	in, _ := metadata.FromIncomingContext(ctx)
	out := metadata.MD{}
	for k, v := range in {
		if strings.HasPrefix(k, ":") || strings.HasPrefix(k, "grpc-") {
			continue
		}
		switch k {
		case "content-type", "user-agent", "te":
			continue
		}
		out[k] = slices.Clone(v)
	}
	return out
}

// identity is a canonical form of md: two callers share an upstream
// watch only if theirs are equal.
func identity(md metadata.MD) string {
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		for _, v := range md[k] {
			b.WriteString(k)
			b.WriteByte(0)
			b.WriteString(v)
			b.WriteByte(0)
		}
	}
	return b.String()
}

var streamAll = &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}

// forward is the handler of every method the proxy does not serve
// itself: it relays the call's messages both ways as raw bytes, with the
// caller's metadata, and hands back the member's header, trailer and
// status as they are.
func (p *Proxy) forward(_ any, ss grpc.ServerStream) error {
	method, ok := grpc.MethodFromServerStream(ss)
	if !ok {
		return status.Error(codes.Internal, "proxy: no method name")
	}
	if !p.cfg.NoKeepAliveSharing {
		switch method {
		case dkvpb.Lease_KeepAlive_FullMethodName:
			return p.keepAlives.keepAlive(ss, kaDKV)
		case etcdserverpb.Lease_LeaseKeepAlive_FullMethodName:
			return p.keepAlives.keepAlive(ss, kaEtcd)
		}
	}
	if p.cache != nil && (method == dkvRange || method == etcdRange) {
		return p.rangeCall(ss, method)
	}
	p.metrics.forwarded.Inc()
	// The revisions of the writes the caller sees keep the read cache
	// from answering it with anything older.
	ident, track := "", p.cache != nil && revisioned[method]
	if track {
		ident = cacheIdentity(passMD(ss.Context()))
	}
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	ctx = metadata.NewOutgoingContext(ctx, passMD(ss.Context()))
	cs, err := p.conn.NewStream(ctx, streamAll, method, grpc.ForceCodec(codec{}))
	if err != nil {
		return err
	}
	go func() {
		// Caller to member; ends with the caller's half-close, or with
		// the call (the handler's return cancels ss's context).
		for {
			f := new(frame)
			if err := ss.RecvMsg(f); err != nil {
				if err == io.EOF {
					cs.CloseSend()
				} else {
					cancel()
				}
				return
			}
			if err := cs.SendMsg(f); err != nil {
				return // the member's error comes out of RecvMsg below
			}
		}
	}()
	if md, err := cs.Header(); err == nil && len(md) > 0 {
		if err := ss.SendHeader(md); err != nil {
			return err
		}
	}
	for {
		f := new(frame)
		if err := cs.RecvMsg(f); err != nil {
			ss.SetTrailer(cs.Trailer())
			if err == io.EOF {
				return nil
			}
			return err
		}
		if track {
			p.cache.saw(ident, headerRevision(f.b))
		}
		if method == dkvpb.Cluster_MemberList_FullMethodName {
			if f, err = p.advertiseSelf(f); err != nil {
				return err
			}
		}
		if err := ss.SendMsg(f); err != nil {
			return err
		}
	}
}

// advertiseSelf rewrites a member list's client URLs to the proxy's
// address: DKV's client adds the client URLs it learns to its endpoints,
// and a client of the proxy should stay one rather than drift to the
// members.
func (p *Proxy) advertiseSelf(f *frame) (*frame, error) {
	var resp dkvpb.MemberListResponse
	if err := proto.Unmarshal(f.b, &resp); err != nil {
		return nil, status.Errorf(codes.Internal, "proxy: decoding a member list: %v", err)
	}
	for _, m := range resp.Members {
		if m.ClientUrl != "" {
			m.ClientUrl = p.advertise
		}
	}
	b, err := proto.Marshal(&resp)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "proxy: encoding a member list: %v", err)
	}
	return &frame{b: b}, nil
}
