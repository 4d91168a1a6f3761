package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/dkv-io/dkv/client"
)

// txnSpec is the JSON form of a transaction read by `dkv txn`; see
// docs/cli.md.
type txnSpec struct {
	Compare []cmpSpec `json:"compare"`
	Success []opSpec  `json:"success"`
	Failure []opSpec  `json:"failure"`
}

type cmpSpec struct {
	Key    string          `json:"key"`
	Target string          `json:"target"`
	Result string          `json:"result"`
	Value  json.RawMessage `json:"value"`
}

type opSpec struct {
	Put    *putSpec   `json:"put"`
	Get    *rangeSpec `json:"get"`
	Delete *rangeSpec `json:"delete"`
}

type putSpec struct {
	Key    string `json:"key"`
	Value  string `json:"value"`
	Lease  int64  `json:"lease"`
	PrevKV bool   `json:"prev_kv"`
}

type rangeSpec struct {
	Key      string `json:"key"`
	RangeEnd string `json:"range_end"`
	Prefix   bool   `json:"prefix"`
	// get only
	Limit    int64 `json:"limit"`
	Revision int64 `json:"revision"`
	KeysOnly bool  `json:"keys_only"`
	// delete only
	PrevKV bool `json:"prev_kv"`
}

// txnRequest is a parsed transaction, ready for the client's builder.
type txnRequest struct {
	cmps          []client.Cmp
	success, fail []client.Op
}

// parseTxn parses the JSON transaction format. Unknown fields are errors,
// so a typo cannot silently drop a condition.
func parseTxn(data []byte) (*txnRequest, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var spec txnSpec
	if err := dec.Decode(&spec); err != nil {
		return nil, fmt.Errorf("txn JSON: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("txn JSON: trailing data after the object")
	}
	req := &txnRequest{}
	for i, c := range spec.Compare {
		cmp, err := parseCmp(c)
		if err != nil {
			return nil, fmt.Errorf("txn JSON: compare[%d]: %w", i, err)
		}
		req.cmps = append(req.cmps, cmp)
	}
	var err error
	if req.success, err = parseOps(spec.Success, "success"); err != nil {
		return nil, err
	}
	if req.fail, err = parseOps(spec.Failure, "failure"); err != nil {
		return nil, err
	}
	return req, nil
}

var cmpResults = map[string]client.CmpResult{
	"equal": client.Equal, "=": client.Equal, "==": client.Equal,
	"not_equal": client.NotEqual, "!=": client.NotEqual,
	"greater": client.Greater, ">": client.Greater,
	"less": client.Less, "<": client.Less,
}

var cmpTargets = map[string]client.CmpTarget{
	"value":           client.CmpValue,
	"version":         client.CmpVersion,
	"create_revision": client.CmpCreateRevision, "create": client.CmpCreateRevision,
	"mod_revision": client.CmpModRevision, "mod": client.CmpModRevision,
	"exists": client.CmpExists,
}

func parseCmp(c cmpSpec) (client.Cmp, error) {
	if c.Key == "" {
		return client.Cmp{}, fmt.Errorf(`"key" is missing`)
	}
	target, ok := cmpTargets[strings.ToLower(c.Target)]
	if !ok {
		return client.Cmp{}, fmt.Errorf(`"target" %q is not one of value, version, create_revision, mod_revision, exists`, c.Target)
	}
	res := client.Equal
	if c.Result != "" {
		if res, ok = cmpResults[strings.ToLower(c.Result)]; !ok {
			return client.Cmp{}, fmt.Errorf(`"result" %q is not one of equal, not_equal, greater, less`, c.Result)
		}
	}
	if len(c.Value) == 0 {
		return client.Cmp{}, fmt.Errorf(`"value" is missing`)
	}
	cmp := client.Cmp{Key: c.Key, Target: target, Result: res}
	switch target {
	case client.CmpValue:
		var s string
		if err := json.Unmarshal(c.Value, &s); err != nil {
			return client.Cmp{}, fmt.Errorf(`"value" of a value compare must be a string`)
		}
		cmp.Value = []byte(s)
	case client.CmpExists:
		var b bool
		if err := json.Unmarshal(c.Value, &b); err != nil {
			return client.Cmp{}, fmt.Errorf(`"value" of an exists compare must be true or false`)
		}
		switch res {
		case client.Equal:
		case client.NotEqual:
			b = !b
		default:
			return client.Cmp{}, fmt.Errorf("an exists compare takes equal or not_equal")
		}
		cmp.Exists, cmp.Result = b, client.Equal
	default:
		n, err := parseJSONInt(c.Value)
		if err != nil {
			return client.Cmp{}, fmt.Errorf(`"value" of a %s compare must be an integer`, c.Target)
		}
		cmp.Number = n
	}
	return cmp, nil
}

// parseJSONInt accepts 5 and "5": large revisions are often quoted.
func parseJSONInt(raw json.RawMessage) (int64, error) {
	var n int64
	if err := json.Unmarshal(raw, &n); err == nil {
		return n, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return 0, err
	}
	return strconv.ParseInt(s, 10, 64)
}

func parseOps(specs []opSpec, branch string) ([]client.Op, error) {
	var ops []client.Op
	for i, s := range specs {
		n := 0
		for _, set := range []bool{s.Put != nil, s.Get != nil, s.Delete != nil} {
			if set {
				n++
			}
		}
		if n != 1 {
			return nil, fmt.Errorf(`txn JSON: %s[%d]: want exactly one of "put", "get", "delete"`, branch, i)
		}
		var opts []client.OpOption
		switch {
		case s.Put != nil:
			if s.Put.Lease != 0 {
				opts = append(opts, client.WithLease(s.Put.Lease))
			}
			if s.Put.PrevKV {
				opts = append(opts, client.WithPrevKV())
			}
			ops = append(ops, client.OpPut(s.Put.Key, []byte(s.Put.Value), opts...))
		case s.Get != nil:
			opts = rangeOpts(s.Get)
			if s.Get.Limit != 0 {
				opts = append(opts, client.WithLimit(s.Get.Limit))
			}
			if s.Get.Revision != 0 {
				opts = append(opts, client.WithRev(s.Get.Revision))
			}
			if s.Get.KeysOnly {
				opts = append(opts, client.WithKeysOnly())
			}
			if s.Get.PrevKV {
				return nil, fmt.Errorf(`txn JSON: %s[%d]: "prev_kv" is for put and delete`, branch, i)
			}
			ops = append(ops, client.OpGet(s.Get.Key, opts...))
		case s.Delete != nil:
			opts = rangeOpts(s.Delete)
			if s.Delete.Limit != 0 || s.Delete.Revision != 0 || s.Delete.KeysOnly {
				return nil, fmt.Errorf(`txn JSON: %s[%d]: "limit", "revision" and "keys_only" are for get`, branch, i)
			}
			if s.Delete.PrevKV {
				opts = append(opts, client.WithPrevKV())
			}
			ops = append(ops, client.OpDelete(s.Delete.Key, opts...))
		}
	}
	return ops, nil
}

func rangeOpts(r *rangeSpec) []client.OpOption {
	var opts []client.OpOption
	if r.Prefix {
		opts = append(opts, client.WithPrefix())
	}
	if r.RangeEnd != "" {
		opts = append(opts, client.WithRange(r.RangeEnd))
	}
	return opts
}
