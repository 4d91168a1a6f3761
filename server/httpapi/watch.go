package httpapi

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/dkv-io/dkv/server/etcdapi"
	"io"
	"net/http"
	"strconv"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// handleWatchHTTP serves GET /v1/watch?key=K[&prefix=true][&range_end=E]
// [&rev=N][&snapshot=true][&prev_kv=true][&progress_notify=true]: one
// watch, streamed as newline-delimited JSON WatchResponse objects until
// the client disconnects. (POST /v1/watch is the grpc-gateway form of the
// bidirectional stream: a body of WatchRequest objects.)
func (a *API) handleWatchHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	flag := func(name string) bool {
		v, _ := strconv.ParseBool(q.Get(name))
		return v
	}
	req := &dkvpb.WatchCreateRequest{
		Key: []byte(q.Get("key")), RangeEnd: []byte(q.Get("range_end")), Prefix: flag("prefix"),
		IncludeInitialSnapshot: flag("snapshot"), PrevKv: flag("prev_kv"), ProgressNotify: flag("progress_notify"),
		FilterPuts: flag("filter_puts"), FilterDeletes: flag("filter_deletes"),
	}
	if v := q.Get("rev"); v != "" {
		rev, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			Error(w, dkverr.New(dkverr.InvalidInput, "rev %q is not an integer", v))
			return
		}
		req.StartRevision = rev
	}
	if a.conn == nil {
		Error(w, dkverr.New(dkverr.Unavailable, "no in-process connection"))
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if a := r.Header.Get("Authorization"); a != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", a)
	}
	if st := cmp.Or(q.Get("store"), r.Header.Get("Dkv-Store")); st != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, etcdapi.StoreMetadata, st)
	}
	stream, err := dkvpb.NewWatchClient(a.conn).Watch(ctx)
	if err != nil {
		Error(w, err)
		return
	}
	if err := stream.Send(&dkvpb.WatchRequest{RequestUnion: &dkvpb.WatchRequest_CreateRequest{CreateRequest: req}}); err != nil {
		if errors.Is(err, io.EOF) {
			// The server ended the stream first (it refused the
			// caller): its status comes with Recv, not Send.
			_, err = stream.Recv()
		}
		Error(w, err)
		return
	}
	first, err := stream.Recv()
	if err != nil {
		Error(w, err)
		return
	}
	if first.Canceled {
		code, ok := dkverr.CodeForReason(first.CancelStatus)
		if !ok {
			code = dkverr.InvalidInput
		}
		e := dkverr.New(code, "%s", first.CancelReason)
		if first.CompactRevision > 0 {
			e.Metadata = map[string]string{"compact_revision": fmt.Sprint(first.CompactRevision)}
			w.Header().Set("X-Dkv-Compact-Revision", fmt.Sprint(first.CompactRevision))
		}
		Error(w, e)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	mo := protojson.MarshalOptions{UseProtoNames: true}
	for resp := first; ; {
		b, err := mo.Marshal(resp)
		if err != nil {
			return
		}
		if len(resp.Events) > 0 {
			b = withPutType(b)
		}
		if _, err := w.Write(append(b, '\n')); err != nil {
			return
		}
		if fl != nil {
			fl.Flush()
		}
		if resp.Canceled {
			return
		}
		if resp, err = stream.Recv(); err != nil {
			if st, ok := status.FromError(err); ok && st.Code() != codes.Canceled {
				b, _ := mo.Marshal(&dkvpb.WatchResponse{Canceled: true, CancelStatus: dkverr.CodeOf(err).Reason(), CancelReason: st.Message()})
				w.Write(append(b, '\n'))
			}
			return
		}
	}
}

// withPutType adds "type":"PUT" to the events of a WatchResponse's JSON
// that have no type: protojson leaves out an enum's zero value, and PUT
// is EventType's, so a reader of the stream would otherwise see a type on
// deletes only. b is returned unchanged if it does not decode.
func withPutType(b []byte) []byte {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return b
	}
	var evs []map[string]json.RawMessage
	if err := json.Unmarshal(m["events"], &evs); err != nil {
		return b
	}
	for _, e := range evs {
		if _, ok := e["type"]; !ok {
			e["type"] = json.RawMessage(`"PUT"`)
		}
	}
	raw, err := json.Marshal(evs)
	if err != nil {
		return b
	}
	m["events"] = raw
	out, err := json.Marshal(m)
	if err != nil {
		return b
	}
	return out
}
