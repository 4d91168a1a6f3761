package docs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/dkv-io/dkv/api/dkv/v1" // registers the services operations name
	"github.com/dkv-io/dkv/api/dkv/v1/openapi"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/server/httpapi"
	"github.com/dkv-io/dkv/server/servertest"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// http.md's examples are run, and its tables checked, by the tests in
// this file. The conventions, for whoever edits http.md:
//
//   - Every ```sh block is an example: a bash script of curl commands
//     against localhost:7863, which the test replaces with the address of
//     a node it started. The blocks run in document order against that one
//     node, as a reader following the page would run them.
//   - Every curl in an example must answer 2xx (the test adds
//     --fail-with-body), except in an example whose shown output is an
//     HTTP status line (curl -i) of another status: that one must answer
//     that status. A curl with --max-time (a stream) may end by that
//     timeout (curl's exit code 28).
//   - A ```json or ```text block right after an example (blank lines
//     between at most) is its output, which the test checks: JSON values
//     in order (a stream may have more), each shown field present with
//     the shown value, except that a string of digits (a revision, an id:
//     64-bit integers are strings) matches any string of digits and "..."
//     in a string matches anything; fields not shown are not checked. A
//     shown status line and headers must be the response's. Other output
//     must match as text.
//   - The examples together call at least one path of every service.
//   - The table of every path (between the "paths" markers) is written
//     by TestHTTPPathTable from the OpenAPI document: go test ./docs
//     -run TestHTTPPathTable -rewrite.

var rewrite = flag.Bool("rewrite", false, "rewrite http.md's generated tables")

const httpDoc = "http.md"

// curlWrapper is prepended to every example: curl quiet but for errors,
// no ~/.curlrc, and (with fail set) failing on any status but 2xx.
func curlWrapper(fail bool) string {
	f := ""
	if fail {
		f = " --fail-with-body"
	}
	return `curl() {
	local rc=0
	command curl -q -sS` + f + ` "$@" || rc=$?
	if [ "$rc" = 28 ]; then
		for a in "$@"; do [ "$a" = --max-time ] && return 0; done
	fi
	return "$rc"
}
`
}

var statusLine = regexp.MustCompile(`^HTTP/[0-9.]+ (\d{3})`)

// TestHTTPExamples runs http.md's examples against a live node and checks
// their shown outputs; see the conventions above.
func TestHTTPExamples(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		msg := "curl is not installed (apt-get install -y curl): http.md's examples need it"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + "; CI=true, so they must run")
		}
		t.Skip(msg)
	}
	bash := lookBash(t)
	src, err := os.ReadFile(httpDoc)
	if err != nil {
		t.Fatal(err)
	}
	n := servertest.Start(t, servertest.WithHTTPPort())
	addr := n.Srv.HTTPAddr()
	dir := t.TempDir()
	var doc struct {
		Tags  []struct{ Name string } `json:"tags"`
		Paths map[string]map[string]struct {
			Tags []string `json:"tags"`
		} `json:"paths"`
	}
	if err := json.Unmarshal([]byte(openapi.JSON), &doc); err != nil {
		t.Fatal(err)
	}
	called := map[string]bool{} // services an example calls
	pathRE := regexp.MustCompile(`localhost:7863(/[A-Za-z0-9/_.-]*)`)
	examples, outputs := 0, 0
	for _, f := range fences(src) {
		if f.lang != "sh" {
			continue
		}
		examples++
		where := fmt.Sprintf("%s:%d", httpDoc, f.line)
		if !strings.Contains(f.body, "curl ") || !strings.Contains(f.body, "localhost:7863") {
			t.Errorf("%s: a sh block is an example: curl against localhost:7863 (show other commands as text)", where)
			continue
		}
		for _, m := range pathRE.FindAllStringSubmatch(f.body, -1) {
			for _, op := range doc.Paths[m[1]] {
				for _, tag := range op.Tags {
					called[tag] = true
				}
			}
		}
		var want *fence
		if f.next != nil && (f.next.lang == "json" || f.next.lang == "text") {
			want = f.next
		}
		wantStatus := 0
		if want != nil {
			if m := statusLine.FindStringSubmatch(want.body); m != nil {
				wantStatus, _ = strconv.Atoi(m[1])
			}
		}
		failing := wantStatus != 0 && wantStatus/100 != 2
		script := curlWrapper(!failing) + strings.ReplaceAll(f.body, "localhost:7863", addr)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, bash, "-e", "-o", "pipefail", "-c", script)
		cmd.Dir = dir // where curl -o writes
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		if err != nil {
			t.Errorf("%s: the example failed: %v\n%s\nstdout:\n%s\nstderr:\n%s", where, err, f.body, stdout.String(), stderr.String())
			continue
		}
		if want == nil {
			continue
		}
		outputs++
		streaming := strings.Contains(f.body, "--max-time")
		if err := matchOutput(want.body, stdout.String(), streaming); err != nil {
			t.Errorf("%s: the output is not the one shown at line %d: %v\n%s\ngot:\n%s", where, want.line, err, f.body, stdout.String())
		}
	}
	if examples < 10 || outputs < 10 {
		t.Fatalf("%s has %d examples, %d with outputs: the extractor is broken", httpDoc, examples, outputs)
	}
	t.Logf("%d examples run, %d outputs checked", examples, outputs)
	for _, tag := range doc.Tags {
		if !called[tag.Name] {
			t.Errorf("%s has no example that calls the %s service", httpDoc, tag.Name)
		}
	}
}

// matchOutput checks an example's output, got, against the shown one.
func matchOutput(shown, got string, streaming bool) error {
	if statusLine.MatchString(shown) {
		return matchHTTP(shown, got)
	}
	wantVals, err := jsonStream(shown)
	if err != nil {
		if !globMatch(strings.TrimSpace(shown), strings.TrimSpace(got)) {
			return errors.New("the text differs")
		}
		return nil
	}
	gotVals, err := jsonStream(got)
	if err != nil {
		return fmt.Errorf("the output is not JSON: %v", err)
	}
	if len(gotVals) < len(wantVals) || len(gotVals) > len(wantVals) && !streaming {
		return fmt.Errorf("%d JSON values, %d shown", len(gotVals), len(wantVals))
	}
	for i, w := range wantVals {
		if err := matchJSON(fmt.Sprintf("value %d", i+1), w, gotVals[i]); err != nil {
			return err
		}
	}
	return nil
}

// matchHTTP checks a curl -i output: status line, shown headers, body.
func matchHTTP(shown, got string) error {
	got = strings.ReplaceAll(got, "\r\n", "\n")
	wantHead, wantBody, _ := strings.Cut(shown, "\n\n")
	gotHead, gotBody, _ := strings.Cut(got, "\n\n")
	wantLines, gotLines := strings.Split(strings.TrimSpace(wantHead), "\n"), strings.Split(gotHead, "\n")
	if wantLines[0] != gotLines[0] {
		return fmt.Errorf("status %q, shown %q", gotLines[0], wantLines[0])
	}
	for _, h := range wantLines[1:] {
		name, val, _ := strings.Cut(h, ":")
		found := false
		for _, g := range gotLines[1:] {
			gn, gv, _ := strings.Cut(g, ":")
			found = found || strings.EqualFold(gn, name) && matchString(strings.TrimSpace(val), strings.TrimSpace(gv))
		}
		if !found {
			return fmt.Errorf("no header %q", h)
		}
	}
	if strings.TrimSpace(wantBody) == "" {
		return nil // no body shown
	}
	return matchOutput(wantBody, gotBody, false)
}

// jsonStream decodes s as a sequence of JSON values.
func jsonStream(s string) ([]any, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var out []any
	for {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, errors.New("no JSON")
	}
	return out, nil
}

var digits = regexp.MustCompile(`^[0-9]+$`)

// matchJSON checks that got has what want shows (see the conventions).
func matchJSON(at string, want, got any) error {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: %v, shown an object", at, got)
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				return fmt.Errorf("%s: no field %q", at, k)
			}
			if err := matchJSON(at+"."+k, wv, gv); err != nil {
				return err
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Errorf("%s: %v, shown %d elements", at, got, len(w))
		}
		for i := range w {
			if err := matchJSON(fmt.Sprintf("%s[%d]", at, i), w[i], g[i]); err != nil {
				return err
			}
		}
	case string:
		g, ok := got.(string)
		if !ok || !matchString(w, g) {
			return fmt.Errorf("%s: %v, shown %q", at, got, w)
		}
	default:
		if fmt.Sprint(want) != fmt.Sprint(got) {
			return fmt.Errorf("%s: %v, shown %v", at, got, want)
		}
	}
	return nil
}

// matchString reports whether got matches a shown string: any string of
// digits for one of digits, else as globMatch.
func matchString(shown, got string) bool {
	if digits.MatchString(shown) {
		return digits.MatchString(got)
	}
	return globMatch(shown, got)
}

// TestHTTPErrorTable: http.md's table of DKV statuses has a row for each,
// with the HTTP status the gateway answers (httpapi.Status) and the gRPC
// code the body's "code" holds.
func TestHTTPErrorTable(t *testing.T) {
	src, err := os.ReadFile(httpDoc)
	if err != nil {
		t.Fatal(err)
	}
	rowRE := regexp.MustCompile("(?m)^\\| `([A-Z_]+)` \\| (\\d{3}) \\| (\\d+) \\|")
	rows := map[string][2]int{}
	for _, m := range rowRE.FindAllStringSubmatch(string(src), -1) {
		h, _ := strconv.Atoi(m[2])
		g, _ := strconv.Atoi(m[3])
		rows[m[1]] = [2]int{h, g}
	}
	for c := dkverr.Code(1); int(c) < dkverr.NumCodes; c++ {
		h := httpapi.Status[c]
		if h == 0 {
			h = 500
		}
		want := [2]int{h, int(c.GRPCCode())}
		if got, ok := rows[c.Reason()]; !ok || got != want {
			t.Errorf("%s: the row of %s says HTTP %d, code %d; want %d, %d", httpDoc, c.Reason(), got[0], got[1], want[0], want[1])
		}
		delete(rows, c.Reason())
	}
	for r := range rows {
		t.Errorf("%s: the status table has %s, which is no DKV status", httpDoc, r)
	}
}

// The markers around http.md's generated table of paths.
const (
	pathsBegin = "<!-- paths: written by TestHTTPPathTable (go test ./docs -run TestHTTPPathTable -rewrite) from api/dkv/v1/openapi/dkv.swagger.json -->"
	pathsEnd   = "<!-- end of paths -->"
)

// TestHTTPPathTable: http.md's table of every gateway path is the
// OpenAPI document's, with each request's fields by their .proto names
// and JSON types, and the messages nested in them; -rewrite writes it.
func TestHTTPPathTable(t *testing.T) {
	src, err := os.ReadFile(httpDoc)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok1 := strings.Cut(string(src), pathsBegin+"\n")
	_, after, ok2 := strings.Cut(rest, pathsEnd)
	if !ok1 || !ok2 {
		t.Fatalf("%s: no %q ... %q section", httpDoc, pathsBegin, pathsEnd)
	}
	table := pathTable(t)
	if *rewrite {
		if err := os.WriteFile(httpDoc, []byte(before+pathsBegin+"\n"+table+pathsEnd+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if rest[:len(rest)-len(after)-len(pathsEnd)] != table {
		t.Errorf("%s's table of paths is not the OpenAPI document's; rewrite it: go test ./docs -run TestHTTPPathTable -rewrite", httpDoc)
	}
}

// pathTable renders the table of every path of the OpenAPI document.
func pathTable(t *testing.T) string {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]struct {
			OperationID string `json:"operationId"`
			Parameters  []struct {
				Name string `json:"name"`
				In   string `json:"in"`
			} `json:"parameters"`
		} `json:"paths"`
	}
	if err := json.Unmarshal([]byte(openapi.JSON), &doc); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("| path | call | request fields |\n|---|---|---|\n")
	nested := map[protoreflect.FullName]protoreflect.MessageDescriptor{}
	for _, p := range slices.Sorted(maps.Keys(doc.Paths)) {
		for _, v := range slices.Sorted(maps.Keys(doc.Paths[p])) {
			op := doc.Paths[p][v]
			svc, method, _ := strings.Cut(op.OperationID, "_")
			d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName("dkv.v1." + svc + "." + method))
			if err != nil {
				t.Fatalf("%s %s: operation %s: %v", v, p, op.OperationID, err)
			}
			md := d.(protoreflect.MethodDescriptor)
			call := svc + "." + method
			if md.IsStreamingClient() || md.IsStreamingServer() {
				call += " (stream)"
			}
			body := true
			for _, prm := range op.Parameters {
				body = body && prm.In == "body"
			}
			fields := fieldList(md.Input(), !body, nested)
			if fields == "" {
				fields = "none"
			}
			fmt.Fprintf(&b, "| `%s %s` | %s | %s |\n", strings.ToUpper(v), p, call, fields)
		}
	}
	b.WriteString("\nThe messages nested in them:\n\n| message | fields |\n|---|---|\n")
	// Listing a message adds the messages nested in it: list them all
	// once to find every one, then in order.
	for listed := 0; listed < len(nested); {
		listed = len(nested)
		for _, md := range slices.Collect(maps.Values(nested)) {
			fieldList(md, false, nested)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(nested)) {
		fields := fieldList(nested[n], false, nested)
		if fields == "" {
			fields = "none"
		}
		fmt.Fprintf(&b, "| <a id=\"%s\"></a>`%s` | %s |\n", anchor(n), n.Name(), fields)
	}
	b.WriteString("\n")
	return b.String()
}

// anchor is the link target of a nested message's row.
func anchor(n protoreflect.FullName) string {
	return "msg-" + strings.ToLower(strings.ReplaceAll(string(n), ".", "-"))
}

// fieldList is md's fields as http.md lists them: `name` and JSON type,
// a oneof's fields grouped; query marks them as query parameters. The
// messages it names are added to nested.
func fieldList(md protoreflect.MessageDescriptor, query bool, nested map[protoreflect.FullName]protoreflect.MessageDescriptor) string {
	var parts []string
	seenOneof := map[protoreflect.FullName]bool{}
	for i := range md.Fields().Len() {
		fd := md.Fields().Get(i)
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			if seenOneof[od.FullName()] {
				continue
			}
			seenOneof[od.FullName()] = true
			var alts []string
			for j := range od.Fields().Len() {
				alts = append(alts, fieldDesc(od.Fields().Get(j), query, nested))
			}
			parts = append(parts, "one of: "+strings.Join(alts, " or "))
			continue
		}
		parts = append(parts, fieldDesc(fd, query, nested))
	}
	return strings.Join(parts, "; ")
}

// fieldDesc is one field as fieldList lists it.
func fieldDesc(fd protoreflect.FieldDescriptor, query bool, nested map[protoreflect.FullName]protoreflect.MessageDescriptor) string {
	name := "`" + string(fd.Name()) + "`"
	if query {
		name = "`?" + string(fd.Name()) + "=`"
	}
	typ := func(fd protoreflect.FieldDescriptor) string {
		switch fd.Kind() {
		case protoreflect.BytesKind:
			return "base64"
		case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
			return "int64"
		case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
			return "uint64"
		case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
			return "int32"
		case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
			return "uint32"
		case protoreflect.BoolKind:
			return "bool"
		case protoreflect.StringKind:
			return "string"
		case protoreflect.EnumKind:
			var vals []string
			for i := range fd.Enum().Values().Len() {
				vals = append(vals, string(fd.Enum().Values().Get(i).Name()))
			}
			return strings.Join(vals, "/")
		case protoreflect.MessageKind:
			m := fd.Message()
			if m.FullName().Parent() == "google.protobuf" {
				return string(m.FullName())
			}
			nested[m.FullName()] = m
			return fmt.Sprintf("[%s](#%s)", m.Name(), anchor(m.FullName()))
		}
		return fd.Kind().String()
	}
	switch {
	case fd.IsMap():
		return name + " map of " + typ(fd.MapKey()) + " to " + typ(fd.MapValue())
	case fd.IsList():
		return name + " list of " + typ(fd)
	case fd.HasPresence() && fd.Kind() != protoreflect.MessageKind && fd.ContainingOneof() != nil && fd.ContainingOneof().IsSynthetic():
		return name + " " + typ(fd) + ", optional"
	}
	return name + " " + typ(fd)
}
