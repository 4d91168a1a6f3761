package mvcc

import (
	"encoding/binary"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
)

// Label limits: structural, the same on every node, so they are checked
// both before proposing and at apply.
const (
	MaxLabels          = 16
	MaxLabelNameBytes  = 63
	MaxLabelValueBytes = 256
)

// ReservedLabel is the query language's prefix term; no label may be
// called that.
const ReservedLabel = "prefix"

// ValidateLabelName checks one label name.
func ValidateLabelName(name string) error {
	if name == "" {
		return invalid("label name is empty")
	}
	if len(name) > MaxLabelNameBytes {
		return invalid("label name %q is %d bytes; the limit is %d", truncate([]byte(name), 64), len(name), MaxLabelNameBytes)
	}
	if name == ReservedLabel {
		return invalid("label name %q is reserved (the query language's prefix term)", name)
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return invalid("label name %q has %q; names are [A-Za-z0-9_.-]", name, c)
		}
	}
	return nil
}

// ValidateLabelValue checks one label value.
func ValidateLabelValue(name, v string) error {
	if len(v) > MaxLabelValueBytes {
		return invalid("label %q: value is %d bytes; the limit is %d", name, len(v), MaxLabelValueBytes)
	}
	if !utf8.ValidString(v) {
		return invalid("label %q: value is not valid UTF-8", name)
	}
	if i := strings.IndexFunc(v, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) || r == '|' }); i >= 0 {
		return invalid("label %q: value %q has %q; values may not hold whitespace, control characters or '|'", name, v, v[i])
	}
	return nil
}

// ValidateLabels checks a put's labels against the limits.
func ValidateLabels(ls map[string]string) error {
	if len(ls) > MaxLabels {
		return invalid("%d labels; the limit is %d per key", len(ls), MaxLabels)
	}
	for n, v := range ls {
		if err := ValidateLabelName(n); err != nil {
			return err
		}
		if err := ValidateLabelValue(n, v); err != nil {
			return err
		}
	}
	return nil
}

// encodeLabels encodes labels sorted by name (deterministic whatever the
// map's order): uvarint n; n × (uvarint len, name, uvarint len, value).
// No labels encode as nil.
func encodeLabels(ls map[string]string) []byte {
	if len(ls) == 0 {
		return nil
	}
	names := make([]string, 0, len(ls))
	for n := range ls {
		names = append(names, n)
	}
	sort.Strings(names)
	b := binary.AppendUvarint(nil, uint64(len(names)))
	for _, n := range names {
		b = binary.AppendUvarint(b, uint64(len(n)))
		b = append(b, n...)
		v := ls[n]
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return b
}

// eachLabel calls fn for each encoded label, in name order; fn returning
// false stops.
func eachLabel(b []byte, fn func(name, value []byte) bool) error {
	if len(b) == 0 {
		return nil
	}
	n, b, ok := uvarint(b)
	if !ok {
		return errCorrupt
	}
	for i := uint64(0); i < n; i++ {
		var l uint64
		if l, b, ok = uvarint(b); !ok || uint64(len(b)) < l {
			return errCorrupt
		}
		name := b[:l]
		b = b[l:]
		if l, b, ok = uvarint(b); !ok || uint64(len(b)) < l {
			return errCorrupt
		}
		if !fn(name, b[:l]) {
			return nil
		}
		b = b[l:]
	}
	return nil
}

// labelOf returns the value of label name in encoded labels b.
func labelOf(b []byte, name string) (string, bool) {
	var val string
	var found bool
	_ = eachLabel(b, func(n, v []byte) bool {
		if string(n) == name {
			val, found = string(v), true
			return false
		}
		return true
	})
	return val, found
}

// decodeLabels decodes encoded labels into a map (nil when none).
func decodeLabels(b []byte) map[string]string {
	if len(b) == 0 {
		return nil
	}
	m := map[string]string{}
	_ = eachLabel(b, func(n, v []byte) bool { m[string(n)] = string(v); return true })
	return m
}

// compareLabel evaluates a LABEL compare: its cmp and whether the result
// is decided regardless of cmp (absent labels).
func compareLabel(c *dkvpb.Compare, rec record, exists bool) bool {
	v, present := "", false
	if exists {
		v, present = labelOf(rec.labels, c.Label)
	}
	if e, ok := c.TargetUnion.(*dkvpb.Compare_Exists); ok {
		same := present == e.Exists
		if c.Result == dkvpb.Compare_NOT_EQUAL {
			return !same
		}
		return c.Result == dkvpb.Compare_EQUAL && same
	}
	if !present {
		return c.Result == dkvpb.Compare_NOT_EQUAL
	}
	cmp := strings.Compare(v, string(c.GetValue()))
	switch c.Result {
	case dkvpb.Compare_EQUAL:
		return cmp == 0
	case dkvpb.Compare_NOT_EQUAL:
		return cmp != 0
	case dkvpb.Compare_GREATER:
		return cmp > 0
	case dkvpb.Compare_LESS:
		return cmp < 0
	}
	return false
}
