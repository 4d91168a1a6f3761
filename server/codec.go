package server

import (
	"context"
	"strings"
	"sync"

	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/mvcc"
	"github.com/dkv-io/dkv/server/etcdapi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Txns nest (a txn's op may be a txn), and protobuf decodes nested
// messages by recursion: a txn nested 5,000 deep made the decoder give
// up with "exceeded maximum recursion depth", which gRPC answers as
// Internal. The client server's codec therefore walks the wire bytes of
// a request that can hold a txn, descending only into the fields that
// can lead to one, and stops at the first txn nested deeper than
// mvcc.MaxTxnDepth, before anything is decoded. gRPC turns every codec
// error into Internal, so the codec decodes nothing and records the
// refusal against the request message; the first interceptor answers it
// (InvalidInput naming the limit) before any handler sees the empty
// message.

// depthCodec is the client gRPC server's codec: gRPC's proto codec with
// the nesting check in front of decoding.
type depthCodec struct{ base encoding.CodecV2 }

func newDepthCodec() depthCodec { return depthCodec{base: encoding.GetCodecV2("proto")} }

func (c depthCodec) Name() string { return c.base.Name() }

func (c depthCodec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

func (c depthCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m := messageOf(v)
	if m == nil || !reachesTxn(m.ProtoReflect().Descriptor()) {
		return c.base.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	if txnTooDeep(m.ProtoReflect().Descriptor(), b, 0, 0) {
		refuseDecoded(v, errTxnTooDeep())
		return nil
	}
	err := proto.Unmarshal(b, m)
	if err != nil && strings.Contains(err.Error(), "exceeded maximum recursion depth") {
		// Nesting the walk does not follow (unknown fields, groups).
		refuseDecoded(v, dkverr.New(dkverr.InvalidInput, "request nests messages too deep to decode: %v", err))
		return nil
	}
	return err
}

func messageOf(v any) proto.Message {
	switch v := v.(type) {
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(v)
	case protoadapt.MessageV2:
		return v
	}
	return nil
}

func errTxnTooDeep() error {
	return dkverr.New(dkverr.InvalidInput, "txns are nested more than %d deep; the limit is %d levels", mvcc.MaxTxnDepth, mvcc.MaxTxnDepth)
}

// maxWalkDepth bounds the walk's recursion whatever the schema: a txn
// level is two messages (TxnRequest, RequestOp).
const maxWalkDepth = 2*(mvcc.MaxTxnDepth+1) + 8

// isTxn reports whether md is a txn request, DKV's or etcd's.
func isTxn(md protoreflect.MessageDescriptor) bool {
	n := md.FullName()
	return n == "dkv.v1.TxnRequest" || n == "etcdserverpb.TxnRequest"
}

// txnTooDeep walks b, an encoded md under txns txn levels and depth
// messages, and reports whether a txn in it nests deeper than
// mvcc.MaxTxnDepth below the outermost. Malformed bytes end the walk
// with false: decoding reports them.
func txnTooDeep(md protoreflect.MessageDescriptor, b []byte, txns, depth int) bool {
	if isTxn(md) {
		if txns++; txns-1 > mvcc.MaxTxnDepth {
			return true
		}
	}
	if depth > maxWalkDepth {
		return true
	}
	fields := md.Fields()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		if typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			fd := fields.ByNumber(num)
			if fd != nil && fd.Kind() == protoreflect.MessageKind && !fd.IsMap() && reachesTxn(fd.Message()) &&
				txnTooDeep(fd.Message(), v, txns, depth+1) {
				return true
			}
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return false
		}
		b = b[n:]
	}
	return false
}

// reaches caches reachesTxn by message name.
var reaches sync.Map // protoreflect.FullName → bool

// reachesTxn reports whether a message of type md can hold a txn (is
// one, or has a field whose message can).
func reachesTxn(md protoreflect.MessageDescriptor) bool {
	if v, ok := reaches.Load(md.FullName()); ok {
		return v.(bool)
	}
	r := reachesFrom(md, map[protoreflect.FullName]bool{})
	reaches.Store(md.FullName(), r)
	return r
}

func reachesFrom(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) bool {
	if isTxn(md) {
		return true
	}
	if seen[md.FullName()] {
		return false
	}
	seen[md.FullName()] = true
	fields := md.Fields()
	for i := range fields.Len() {
		if fd := fields.Get(i); fd.Message() != nil && reachesFrom(fd.Message(), seen) {
			return true
		}
	}
	return false
}

// refused holds the requests the codec refused to decode, by message
// pointer, until the call's first interceptor answers them.
var refused sync.Map // message pointer → error

func refuseDecoded(v any, err error) { refused.Store(v, err) }

// refusal is what the codec recorded against req, taken out.
func refusal(req any, method string) error {
	e, ok := refused.LoadAndDelete(req)
	if !ok {
		return nil
	}
	err := e.(error)
	if etcdapi.IsEtcdMethod(method) {
		// etcd's clients read an error's text behind "etcdserver: ".
		return status.Error(codes.InvalidArgument, "etcdserver: "+dkverr.Message(err))
	}
	return err
}

// unaryDecodeRefusals answers a request the codec refused to decode.
func unaryDecodeRefusals(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := refusal(req, info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// streamDecodeRefusals answers, on a stream, each message the codec
// refused to decode: the stream ends with the refusal.
func streamDecodeRefusals(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, refusingStream{ss, info.FullMethod})
}

type refusingStream struct {
	grpc.ServerStream
	method string
}

func (s refusingStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if err := refusal(m, s.method); err != nil {
		return err
	}
	return nil
}
