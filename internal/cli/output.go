package cli

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/dkv-io/dkv/client"
)

// jsonKV is a key-value in -o json output. Keys and values that are
// valid UTF-8 appear as "key" and "value"; others as "key_base64" and
// "value_base64" (JSON strings cannot carry arbitrary bytes).
type jsonKV struct {
	Key            *string `json:"key,omitempty"`
	KeyBase64      string  `json:"key_base64,omitempty"`
	Value          *string `json:"value,omitempty"`
	ValueBase64    string  `json:"value_base64,omitempty"`
	CreateRevision int64   `json:"create_revision"`
	ModRevision    int64   `json:"mod_revision"`
	Version        int64   `json:"version"`
	Lease          int64   `json:"lease,omitempty"`
	// Labels are the key's labels (dkv put --label), omitted when none.
	Labels map[string]string `json:"labels,omitempty"`
}

func toJSONKV(kv *client.KeyValue) *jsonKV {
	if kv == nil {
		return nil
	}
	j := &jsonKV{CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision, Version: kv.Version, Lease: kv.Lease, Labels: kv.Labels}
	j.Key, j.KeyBase64 = jsonKey(kv.Key)
	if utf8.Valid(kv.Value) {
		s := string(kv.Value)
		j.Value = &s
	} else {
		j.ValueBase64 = base64.StdEncoding.EncodeToString(kv.Value)
	}
	return j
}

// jsonKey is a key for -o json: the string when it is valid UTF-8, else
// its base64 (the second result).
func jsonKey(k string) (*string, string) {
	if utf8.ValidString(k) {
		return &k, ""
	}
	return nil, base64.StdEncoding.EncodeToString([]byte(k))
}

func toJSONKVs(kvs []*client.KeyValue) []*jsonKV {
	out := make([]*jsonKV, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, toJSONKV(kv))
	}
	return out
}

type jsonRange struct {
	Revision int64     `json:"revision"`
	Count    int64     `json:"count"`
	More     bool      `json:"more"`
	KVs      []*jsonKV `json:"kvs"`
}

func toJSONRange(r *client.RangeResult) *jsonRange {
	return &jsonRange{Revision: r.Revision, Count: r.Count, More: r.More, KVs: toJSONKVs(r.KVs)}
}

type jsonPut struct {
	Revision int64   `json:"revision"`
	PrevKV   *jsonKV `json:"prev_kv,omitempty"`
	Lease    int64   `json:"lease,omitempty"`
}

type jsonDelete struct {
	Revision int64     `json:"revision"`
	Deleted  int64     `json:"deleted"`
	PrevKVs  []*jsonKV `json:"prev_kvs,omitempty"`
}

// WriteJSON writes v to w as one line of JSON, the shape of every -o json
// answer.
func WriteJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// writeKVs prints key and value lines, the text form of several keys.
func writeKVs(w io.Writer, kvs []*client.KeyValue, keysOnly bool) {
	for _, kv := range kvs {
		if keysOnly {
			fmt.Fprintln(w, kv.Key)
			continue
		}
		fmt.Fprintf(w, "%s\n%s\n", kv.Key, kv.Value)
		if len(kv.Labels) > 0 {
			// Only labelled keys get the third line, so the output of
			// unlabelled keys is as before labels existed.
			fmt.Fprintf(w, "labels: %s\n", formatLabels(kv.Labels))
		}
	}
}
