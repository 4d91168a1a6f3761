package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	_ "github.com/dkv-io/dkv/api/dkv/v1" // registers the services the selectors name
	"github.com/dkv-io/dkv/api/dkv/v1/openapi"
	"github.com/dkv-io/dkv/server/servertest"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// gatewayYAML is the gateway's HTTP rules, which the gateway code and the
// OpenAPI document are both generated from.
const gatewayYAML = "../../api/dkv/v1/gateway.yaml"

// httpRule is one rule of gateway.yaml, as google.api.HttpRule spells it.
type httpRule struct {
	Selector           string     `yaml:"selector"`
	Get                string     `yaml:"get"`
	Put                string     `yaml:"put"`
	Post               string     `yaml:"post"`
	Delete             string     `yaml:"delete"`
	Patch              string     `yaml:"patch"`
	Body               string     `yaml:"body"`
	AdditionalBindings []httpRule `yaml:"additional_bindings"`
}

// binding is one verb and path of a rule.
type binding struct {
	selector, verb, path, body string
}

// gatewayBindings reads every binding of gateway.yaml. The decoding is
// strict: a key this test does not know (a custom verb, response_body)
// fails it instead of being skipped.
func gatewayBindings(t *testing.T) []binding {
	t.Helper()
	src, err := os.ReadFile(gatewayYAML)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Type          string `yaml:"type"`
		ConfigVersion int    `yaml:"config_version"`
		HTTP          struct {
			Rules []httpRule `yaml:"rules"`
		} `yaml:"http"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		t.Fatalf("%s: %v", gatewayYAML, err)
	}
	var out []binding
	var add func(sel string, r httpRule)
	add = func(sel string, r httpRule) {
		n := 0
		for verb, path := range map[string]string{"get": r.Get, "put": r.Put, "post": r.Post, "delete": r.Delete, "patch": r.Patch} {
			if path != "" {
				out = append(out, binding{sel, verb, path, r.Body})
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%s: rule %s has %d verbs, want one", gatewayYAML, sel, n)
		}
		for _, b := range r.AdditionalBindings {
			add(sel, b)
		}
	}
	for _, r := range cfg.HTTP.Rules {
		add(r.Selector, r)
	}
	if len(out) < 50 {
		t.Fatalf("%s: only %d bindings read", gatewayYAML, len(out))
	}
	return out
}

// The parts of an OpenAPI 2.0 document the test reads.
type (
	oaDoc struct {
		Swagger     string                       `json:"swagger"`
		Info        struct{ Title string }       `json:"info"`
		Paths       map[string]map[string]oaOp   `json:"paths"`
		Definitions map[string]oaSchema          `json:"definitions"`
		SecDefs     map[string]map[string]string `json:"securityDefinitions"`
	}
	oaOp struct {
		OperationID string            `json:"operationId"`
		Parameters  []oaParam         `json:"parameters"`
		Responses   map[string]oaResp `json:"responses"`
	}
	oaParam struct {
		Name   string    `json:"name"`
		In     string    `json:"in"`
		Schema *oaSchema `json:"schema"`
	}
	oaResp struct {
		Schema *oaSchema `json:"schema"`
	}
	oaSchema struct {
		Ref                  string              `json:"$ref"`
		Type                 string              `json:"type"`
		Format               string              `json:"format"`
		Properties           map[string]oaSchema `json:"properties"`
		Items                *oaSchema           `json:"items"`
		AdditionalProperties additional          `json:"additionalProperties"`
	}
	// additional is additionalProperties: a schema, or true (protobufAny).
	additional struct{ *oaSchema }
)

func (a *additional) UnmarshalJSON(b []byte) error {
	if string(b) == "true" || string(b) == "false" {
		return nil
	}
	a.oaSchema = new(oaSchema)
	return json.Unmarshal(b, a.oaSchema)
}

// get fetches path from the node's HTTP port.
func get(t *testing.T, base, path string) (*http.Response, []byte) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// TestOpenAPIServedAndComplete: a node serves the gateway's OpenAPI
// document at /v1/openapi.json, and the document has every binding of
// gateway.yaml (so a rule added without `make generate` fails here), and
// no path the gateway does not serve. Each operation's request and
// response schemas have exactly the fields of the method's messages, by
// their .proto names, down through nested messages, with bytes as
// base64 and 64-bit integers as strings: what the gateway reads and
// writes.
func TestOpenAPIServedAndComplete(t *testing.T) {
	n := servertest.Start(t, servertest.WithHTTPPort())
	base := "http://" + n.Srv.HTTPAddr()
	resp, body := get(t, base, "/v1/openapi.json")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /v1/openapi.json: %d, Content-Type %q, want 200 application/json: %.200s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if string(body) != openapi.JSON {
		t.Fatal("GET /v1/openapi.json is not api/dkv/v1/openapi's document")
	}
	var doc oaDoc
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("/v1/openapi.json: %v", err)
	}
	if doc.Swagger != "2.0" || doc.Info.Title != "DKV HTTP/JSON API" {
		t.Errorf("swagger %q, title %q: want 2.0 and the title of api/dkv/v1/openapi/options.yaml", doc.Swagger, doc.Info.Title)
	}
	if doc.SecDefs["token"]["name"] != "Authorization" {
		t.Errorf("securityDefinitions: %v, want token in the Authorization header", doc.SecDefs)
	}

	seen := map[string]bool{}
	for _, b := range gatewayBindings(t) {
		where := fmt.Sprintf("%s (%s %s)", b.selector, strings.ToUpper(b.verb), b.path)
		seen[b.verb+" "+b.path] = true
		desc, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(b.selector))
		if err != nil {
			t.Errorf("%s: no such gRPC method: %v", where, err)
			continue
		}
		md := desc.(protoreflect.MethodDescriptor)
		op, ok := doc.Paths[b.path][b.verb]
		if !ok {
			t.Errorf("%s: not in /v1/openapi.json; run make generate", where)
			continue
		}
		if want := string(md.Parent().Name()) + "_" + string(md.Name()); op.OperationID != want {
			t.Errorf("%s: operationId %q, want %q", where, op.OperationID, want)
		}
		switch b.body {
		case "*":
			var req *oaSchema
			for _, p := range op.Parameters {
				if p.In == "body" {
					req = p.Schema
				}
			}
			if req == nil {
				t.Errorf("%s: no body parameter", where)
				break
			}
			checkSchema(t, where+" request", &doc, *req, md.Input(), map[string]bool{})
		case "":
			var names []string
			for _, p := range op.Parameters {
				if p.In != "query" {
					t.Errorf("%s: parameter %s in %s, want query parameters only", where, p.Name, p.In)
				}
				names = append(names, strings.SplitN(p.Name, ".", 2)[0])
			}
			checkNames(t, where+" query parameters", slices.Compact(sorted(names)), md.Input())
		default:
			t.Errorf("%s: body %q: the test knows only \"*\" and none", where, b.body)
		}
		ok200 := op.Responses["200"].Schema
		if ok200 == nil {
			t.Errorf("%s: no 200 response schema", where)
			continue
		}
		if md.IsStreamingServer() {
			// Each line of a stream is {"result": ...} or {"error": ...}.
			r, ok := ok200.Properties["result"]
			if !ok {
				t.Errorf("%s: streaming response without result", where)
				continue
			}
			ok200 = &r
		}
		checkSchema(t, where+" response", &doc, *ok200, md.Output(), map[string]bool{})
	}
	for path, ops := range doc.Paths {
		for verb := range ops {
			if !seen[verb+" "+path] {
				t.Errorf("/v1/openapi.json has %s %s, which gateway.yaml has no rule for", strings.ToUpper(verb), path)
			}
		}
	}
}

func sorted(s []string) []string { sort.Strings(s); return s }

// checkNames fails unless names are md's field names.
func checkNames(t *testing.T, where string, names []string, md protoreflect.MessageDescriptor) {
	t.Helper()
	var want []string
	for i := range md.Fields().Len() {
		want = append(want, string(md.Fields().Get(i).Name()))
	}
	if want = sorted(want); !slices.Equal(names, want) {
		t.Errorf("%s: fields %v, want %v (%s's .proto names)", where, names, want, md.FullName())
	}
}

// checkSchema fails unless s (a $ref to a definition) describes md: one
// property per field, by its .proto name, each of the JSON type the
// gateway reads and writes, nested messages alike. Well-known types
// have JSON forms of their own and are not followed.
func checkSchema(t *testing.T, where string, doc *oaDoc, s oaSchema, md protoreflect.MessageDescriptor, done map[string]bool) {
	t.Helper()
	if md.FullName().Parent() == "google.protobuf" || md.FullName() == "google.rpc.Status" {
		return
	}
	name, ok := strings.CutPrefix(s.Ref, "#/definitions/")
	if !ok {
		t.Errorf("%s: schema %+v is no definition, want one for %s", where, s, md.FullName())
		return
	}
	if done[name] {
		return
	}
	done[name] = true
	def, ok := doc.Definitions[name]
	if !ok {
		t.Errorf("%s: %s is not defined", where, s.Ref)
		return
	}
	var props []string
	for p := range def.Properties {
		props = append(props, p)
	}
	checkNames(t, where+" "+name, sorted(props), md)
	for i := range md.Fields().Len() {
		fd := md.Fields().Get(i)
		p, ok := def.Properties[string(fd.Name())]
		if !ok {
			continue // reported by checkNames
		}
		at := where + " " + name + "." + string(fd.Name())
		switch {
		case fd.IsMap():
			if p.AdditionalProperties.oaSchema == nil {
				t.Errorf("%s: a map without additionalProperties", at)
				continue
			}
			p = *p.AdditionalProperties.oaSchema
			fd = fd.MapValue()
		case fd.IsList():
			if p.Type != "array" || p.Items == nil {
				t.Errorf("%s: type %q, want an array", at, p.Type)
				continue
			}
			p = *p.Items
		}
		switch fd.Kind() {
		case protoreflect.BytesKind:
			if p.Type != "string" || p.Format != "byte" {
				t.Errorf("%s: bytes as %s/%s, want string/byte (base64)", at, p.Type, p.Format)
			}
		case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
			protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
			if p.Type != "string" {
				t.Errorf("%s: a 64-bit integer as %q, want string", at, p.Type)
			}
		case protoreflect.EnumKind:
			if p.Ref == "" && p.Type != "string" {
				t.Errorf("%s: an enum as %q, want its names", at, p.Type)
			}
		case protoreflect.MessageKind:
			checkSchema(t, where, doc, p, fd.Message(), done)
		}
	}
}

// TestGatewayWritesDocumentedNames: what the live gateway answers uses
// the document's field names (the .proto names), and a field the
// document does not have is refused, naming it: the lock's TTL is ttl_ms.
func TestGatewayWritesDocumentedNames(t *testing.T) {
	n := servertest.Start(t, servertest.WithHTTPPort())
	base := "http://" + n.Srv.HTTPAddr()
	var doc oaDoc
	if err := json.Unmarshal([]byte(openapi.JSON), &doc); err != nil {
		t.Fatal(err)
	}
	post := func(path, body string) (int, map[string]any) {
		t.Helper()
		c := &http.Client{Timeout: 10 * time.Second}
		resp, err := c.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		return resp.StatusCode, m
	}
	code, m := post("/v1/lock/acquire", `{"key":"ZG9jcw==","ttl":5}`)
	if msg, _ := m["message"].(string); code != http.StatusBadRequest || !strings.Contains(msg, `unknown field "ttl"`) {
		t.Errorf(`{"ttl":5}: %d %v, want 400 naming the field`, code, m)
	}
	code, m = post("/v1/lock/acquire", `{"key":"ZG9jcw==","ttl_ms":"5000","owner":"docs"}`)
	if code != http.StatusOK || m["acquired"] != true {
		t.Fatalf(`{"ttl_ms":"5000"}: %d %v, want the lock`, code, m)
	}
	// The response's fields, nested ones included, are the definition's.
	var walk func(at string, v map[string]any, ref string)
	walk = func(at string, v map[string]any, ref string) {
		def := doc.Definitions[strings.TrimPrefix(ref, "#/definitions/")]
		for k, fv := range v {
			p, ok := def.Properties[k]
			if !ok {
				t.Errorf("the gateway wrote %s%s, which %s does not have", at, k, ref)
				continue
			}
			if sub, isObj := fv.(map[string]any); isObj && p.Ref != "" {
				walk(at+k+".", sub, p.Ref)
			}
		}
	}
	op := doc.Paths["/v1/lock/acquire"]["post"]
	walk("", m, op.Responses["200"].Schema.Ref)
	for _, k := range []string{"header", "handle", "lease", "owner"} {
		if _, ok := m[k]; !ok {
			t.Errorf("the gateway's answer has no %s: %v", k, m)
		}
	}
	if _, ok := doc.Definitions["v1LockAcquireRequest"].Properties["ttl_ms"]; !ok {
		t.Error("the document's LockAcquireRequest has no ttl_ms")
	}
}
