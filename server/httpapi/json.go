package httpapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/mvcc"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The HTTP/JSON gateway's guards: every request body is capped (413 names
// the limit), and bytes fields must be standard base64, so that a plain
// string sent by mistake is refused instead of being decoded into other
// bytes.

// jsonEnvelopeBytes is what a JSON body may hold beyond the base64 of a
// gRPC request: field names, quotes, numbers, whitespace.
const jsonEnvelopeBytes = 64 << 10

// JSONBodyLimit is the largest JSON body accepted: a request of
// maxRequestBytes encodes its bytes fields in base64, 4 bytes for every 3.
func JSONBodyLimit(maxRequestBytes int) int64 {
	return int64(maxRequestBytes)/3*4 + 4 + jsonEnvelopeBytes
}

// bodyGuard caps a request body and remembers that the cap was hit, so
// that the gateway's error (the generated code turns every decoding error
// into InvalidArgument) can be answered with 413.
type bodyGuard struct {
	io.ReadCloser
	limit   int64
	what    string // what the limit is, for the message
	tripped atomic.Bool
}

type bodyGuardKey struct{}

func (g *bodyGuard) Read(p []byte) (int, error) {
	n, err := g.ReadCloser.Read(p)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		g.tripped.Store(true)
	}
	return n, err
}

func (g *bodyGuard) message() string {
	return fmt.Sprintf("request body is larger than the limit of %d bytes (%s)", g.limit, g.what)
}

// capBodies wraps every request body of h in a bodyGuard: the plain-value
// endpoint /v1/keys/ takes a value of at most MaxValueBytes, everything
// else a JSON request of at most JSONBodyLimit.
func (a *API) capBodies(gw *runtime.ServeMux, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g := &bodyGuard{limit: JSONBodyLimit(a.o.MaxRequestBytes),
			what: fmt.Sprintf("a request of --max-value-bytes %d plus %d bytes, in JSON with bytes fields in base64", a.o.MaxValueBytes, a.o.EnvelopeBytes)}
		plain := strings.HasPrefix(r.URL.Path, "/v1/keys/")
		if plain {
			g.limit, g.what = int64(a.o.MaxValueBytes), "--max-value-bytes"
		}
		ctx := context.WithValue(r.Context(), bodyGuardKey{}, g)
		r = r.WithContext(ctx)
		if r.ContentLength > g.limit {
			// Refused before reading: the connection is closed after the
			// answer rather than drained.
			g.tripped.Store(true)
			w.Header().Set("Connection", "close")
			if plain {
				w.Header().Set("X-Dkv-Status", dkverr.InvalidInput.Reason())
				http.Error(w, g.message(), http.StatusRequestEntityTooLarge)
				return
			}
			_, out := runtime.MarshalerForRequest(gw, r)
			runtime.HTTPError(ctx, gw, out, w, r, status.Error(codes.ResourceExhausted, g.message()))
			return
		}
		g.ReadCloser = http.MaxBytesReader(w, r.Body, g.limit)
		r.Body = g
		h.ServeHTTP(w, r)
	})
}

// gatewayError is the gateway's error handler: grpc-gateway's own, except
// that an oversized request answers 413 naming the limit (grpc-gateway
// maps every ResourceExhausted to 429, which says "retry later": wrong for
// a request that will never fit).
func (a *API) gatewayError(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	if g, _ := r.Context().Value(bodyGuardKey{}).(*bodyGuard); g != nil && g.tripped.Load() {
		err = status.Error(codes.ResourceExhausted, g.message())
		w = statusWriter{w, http.StatusRequestEntityTooLarge}
	} else if st, ok := status.FromError(err); ok && isMessageSizeError(st) {
		err = status.Error(codes.ResourceExhausted, fmt.Sprintf("request is larger than the limit of %d bytes (--max-value-bytes %d plus %d): %s",
			a.o.MaxRequestBytes, a.o.MaxValueBytes, a.o.EnvelopeBytes, st.Message()))
		w = statusWriter{w, http.StatusRequestEntityTooLarge}
	} else if st := Status[dkverr.CodeOf(err)]; st != 0 {
		w = statusWriter{w, st}
	}
	runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
}

// isMessageSizeError reports whether st is gRPC's own refusal of a message
// over the size limit, as opposed to a DKV ResourceExhausted (such as a
// full disk), which carries a DKV ErrorInfo detail.
func isMessageSizeError(st *status.Status) bool {
	if st.Code() != codes.ResourceExhausted {
		return false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == dkverr.Domain {
			return false
		}
	}
	return strings.Contains(st.Message(), "larger than max")
}

// statusWriter replaces the status code the wrapped handler writes.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w statusWriter) WriteHeader(int) { w.ResponseWriter.WriteHeader(w.code) }

// strictJSONPb is the gateway's JSON marshaler with a decoder that checks
// every bytes field of the target message before protojson sees it:
// protojson also accepts unpadded and URL-safe base64, so "key" would
// silently become the two bytes 0x91 0xec.
type strictJSONPb struct {
	runtime.JSONPb
}

func (m *strictJSONPb) NewDecoder(r io.Reader) runtime.Decoder {
	return &strictDecoder{dec: json.NewDecoder(r), m: &m.JSONPb, strict: true}
}

// depthJSONPb is a gateway's JSON marshaler whose decoder refuses a body
// nested deeper than maxJSONDepth before decoding it (etcd's gateway:
// etcd's JSON keeps its own base64 rules).
type depthJSONPb struct {
	runtime.JSONPb
}

func (m *depthJSONPb) NewDecoder(r io.Reader) runtime.Decoder {
	return &strictDecoder{dec: json.NewDecoder(r), m: &m.JSONPb}
}

type strictDecoder struct {
	dec    *json.Decoder
	m      *runtime.JSONPb
	strict bool // check bytes fields' base64
}

func (d *strictDecoder) Decode(v any) error {
	var raw json.RawMessage
	if err := d.dec.Decode(&raw); err != nil {
		if strings.Contains(err.Error(), "exceeded max depth") {
			return errJSONTooDeep()
		}
		return err
	}
	// Decoding recurses (CheckBytesFields, protojson): the nesting is
	// checked first, by a scan.
	if jsonDepth(raw, maxJSONDepth) > maxJSONDepth {
		return errJSONTooDeep()
	}
	if pm, ok := v.(proto.Message); ok && d.strict {
		if err := CheckBytesFields(pm.ProtoReflect().Descriptor(), raw); err != nil {
			return err
		}
	}
	return d.m.Unmarshal(raw, v)
}

// maxJSONDepth is the deepest a JSON request may nest: a txn with txns
// nested mvcc.MaxTxnDepth levels in it (three JSON levels each: the
// branch's array, the op, the txn), with room for the innermost ops.
// A txn nested one level more fits too, and is refused by the gRPC
// server's codec, naming the limit; deeper ones stop here.
const maxJSONDepth = 3*(mvcc.MaxTxnDepth+1) + 8

func errJSONTooDeep() error {
	return fmt.Errorf("the JSON body nests more than %d levels; txns are nested at most %d deep", maxJSONDepth, mvcc.MaxTxnDepth)
}

// jsonDepth is how deep objects and arrays nest in b, counted up to
// limit+1.
func jsonDepth(b []byte, limit int) int {
	depth, deepest, inString, escaped := 0, 0, false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			if depth++; depth > deepest {
				if deepest = depth; deepest > limit {
					return deepest
				}
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}

// DecodeStrict is what the gateway does with one JSON request.
func DecodeStrict(raw []byte, m proto.Message) error {
	if err := CheckBytesFields(m.ProtoReflect().Descriptor(), raw); err != nil {
		return err
	}
	return protojson.Unmarshal(raw, m)
}

// CheckBytesFields walks a JSON object along message md and refuses any
// bytes field that is not standard base64 with padding. What is not JSON
// or does not fit md is left for protojson to report.
func CheckBytesFields(md protoreflect.MessageDescriptor, raw []byte) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil
	}
	return checkMessage(md, v, "")
}

func checkMessage(md protoreflect.MessageDescriptor, v any, path string) error {
	obj, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	fields := md.Fields()
	for name, fv := range obj {
		fd := fields.ByJSONName(name)
		if fd == nil {
			fd = fields.ByName(protoreflect.Name(name))
		}
		if fd == nil || fv == nil {
			continue
		}
		p := path + name
		switch {
		case fd.IsList():
			arr, _ := fv.([]any)
			for i, e := range arr {
				if err := checkValue(fd, e, p+"["+strconv.Itoa(i)+"]"); err != nil {
					return err
				}
			}
		case fd.IsMap():
			m, _ := fv.(map[string]any)
			for k, e := range m {
				if err := checkValue(fd.MapValue(), e, p+"["+strconv.Quote(k)+"]"); err != nil {
					return err
				}
			}
		default:
			if err := checkValue(fd, fv, p); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkValue(fd protoreflect.FieldDescriptor, v any, path string) error {
	switch fd.Kind() {
	case protoreflect.BytesKind:
		return checkBase64(v, path)
	case protoreflect.MessageKind, protoreflect.GroupKind:
		md := fd.Message()
		if md.FullName() == "google.protobuf.BytesValue" {
			return checkBase64(v, path)
		}
		if md.FullName().Parent() == "google.protobuf" {
			return nil // other well-known types have their own JSON forms
		}
		return checkMessage(md, v, path+".")
	}
	return nil
}

func checkBase64(v any, path string) error {
	s, ok := v.(string)
	if !ok {
		return nil
	}
	if _, err := base64.StdEncoding.Strict().DecodeString(s); err != nil {
		shown := s
		if len(shown) > 40 {
			shown = shown[:40] + "..."
		}
		return fmt.Errorf("field %q: %q is not standard base64 (%v); bytes fields take base64 with padding in JSON, e.g. %q for %q (the plain /v1/keys/KEY endpoint takes keys and values as they are)",
			path, shown, err, base64.StdEncoding.EncodeToString([]byte(shown)), shown)
	}
	return nil
}

// handleWatchPost fronts the gateway's POST /v1/watch (a stream of
// WatchRequest objects): it reads and checks the first request itself, so
// that an empty body, malformed JSON or a first request that creates no
// watch is answered 400 at once; the gateway alone would stream nothing
// and never answer. The checked request is handed on with the rest of the
// body.
func (a *API) handleWatchPost(gw *runtime.ServeMux) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, out := runtime.MarshalerForRequest(gw, r)
		fail := func(err error) { runtime.HTTPError(r.Context(), gw, out, w, r, err) }
		bad := func(format string, args ...any) {
			fail(status.Errorf(codes.InvalidArgument, format, args...))
		}
		dec := json.NewDecoder(r.Body)
		var raw json.RawMessage
		switch err := dec.Decode(&raw); {
		case errors.Is(err, io.EOF):
			bad(`the body holds no WatchRequest: send JSON objects, the first a create_request, e.g. {"create_request":{"key":"a2V5"}}`)
			return
		case err != nil:
			bad("the first WatchRequest is not valid JSON: %v", err)
			return
		}
		var req dkvpb.WatchRequest
		if err := DecodeStrict(raw, &req); err != nil {
			bad("the first WatchRequest: %v", err)
			return
		}
		if req.GetCreateRequest() == nil {
			bad(`the first WatchRequest must be a create_request, e.g. {"create_request":{"key":"a2V5"}}`)
			return
		}
		// The stream is full duplex: watches are created from the body
		// while responses flow (HTTP/1.1 answers only once the body is
		// read otherwise).
		_ = http.NewResponseController(w).EnableFullDuplex()
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(raw), dec.Buffered(), r.Body), r.Body}
		gatewayStore(gw).ServeHTTP(w, r)
	}
}
