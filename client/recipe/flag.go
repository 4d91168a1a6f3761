package recipe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/dkv-io/dkv/client"
)

// FlagPrefix is where feature flags live: dkv.flags/KEY -> a Flag as JSON.
const FlagPrefix = "dkv.flags/"

// Limits on a flag document; SetFlag refuses more with ErrInvalidInput.
const (
	MaxFlagKey      = 128
	MaxFlagVariants = 64
	MaxFlagRules    = 64
	MaxFlagValues   = 1024 // values of one rule
	MaxFlagDocument = 64 << 10
	// FlagBuckets is the number of rollout buckets: a targeting key's
	// bucket is in [0, FlagBuckets), so percentages have 0.01 resolution.
	FlagBuckets = 10000
)

// FlagType is the type of every variant's value.
type FlagType string

const (
	FlagBool   FlagType = "bool"
	FlagString FlagType = "string"
	FlagNumber FlagType = "number"
	FlagJSON   FlagType = "json"
)

// OpenFeature's names for the types, accepted in a document so that it
// can be written in either vocabulary. SetFlag stores DKV's name, which
// is the only one older clients read; an evaluation reports DKV's name.
const (
	flagBoolean FlagType = "boolean" // bool
	flagInteger FlagType = "integer" // number, whose variants must be integers
	flagFloat   FlagType = "float"   // number
	flagObject  FlagType = "object"  // json
)

// maxFlagInteger bounds an integer variant: OpenFeature's IntEvaluation
// returns an int64, and a float64 holds integers exactly up to 2^53.
const maxFlagInteger = 1 << 53

// canonical is DKV's name for t, or "" if t is not a flag type.
func (t FlagType) canonical() FlagType {
	switch t {
	case FlagBool, flagBoolean:
		return FlagBool
	case FlagString:
		return FlagString
	case FlagNumber, flagInteger, flagFloat:
		return FlagNumber
	case FlagJSON, flagObject:
		return FlagJSON
	}
	return ""
}

// Rule operators.
const (
	OpEquals = "eq"     // the attribute equals Values[0]
	OpIn     = "in"     // the attribute is one of Values
	OpNotIn  = "not_in" // the attribute is absent or none of Values
)

// FlagRule serves Variant when the evaluation's attribute matches.
type FlagRule struct {
	Attribute string   `json:"attribute"`
	Op        string   `json:"op"`
	Values    []string `json:"values"`
	Variant   string   `json:"variant"`
}

// FlagRollout serves Variant to Percent% of targeting keys, by sticky
// bucket: raising Percent keeps every key that already had Variant.
type FlagRollout struct {
	Variant string  `json:"variant"`
	Percent float64 `json:"percent"`
}

// Flag is a feature flag document.
type Flag struct {
	Key string `json:"key"`
	// Type is bool, string, number or json; OpenFeature's boolean,
	// integer (a number whose variants are integers), float and object
	// are accepted too, and stored and read back as DKV's name.
	Type FlagType `json:"type"`
	// Variants maps each variant name to its value (of Type).
	Variants map[string]json.RawMessage `json:"variants"`
	// DefaultVariant is served when no rule matches and the key is
	// outside the rollout; OffVariant when Enabled is false (kill switch).
	DefaultVariant string       `json:"defaultVariant"`
	OffVariant     string       `json:"offVariant"`
	Enabled        bool         `json:"enabled"`
	Rules          []FlagRule   `json:"rules,omitempty"`
	Rollout        *FlagRollout `json:"rollout,omitempty"`
	// ModRevision is the revision that last wrote the flag (not stored).
	ModRevision int64 `json:"-"`
}

// Reason says why an evaluation returned its variant.
type Reason string

const (
	ReasonDisabled       Reason = "DISABLED"        // kill switch: OffVariant
	ReasonTargetingMatch Reason = "TARGETING_MATCH" // a rule matched
	ReasonSplit          Reason = "SPLIT"           // inside the rollout
	ReasonDefault        Reason = "DEFAULT"         // DefaultVariant
	ReasonError          Reason = "ERROR"
)

// ErrFlagNotFound: no flag with that key (Kind ErrNotFound).
var ErrFlagNotFound = &client.Error{Kind: client.ErrNotFound, Msg: "flag not found"}

// ErrFlagType: the flag is not of the type asked (Kind ErrInvalidInput).
var ErrFlagType = &client.Error{Kind: client.ErrInvalidInput, Msg: "flag type mismatch"}

// flagInvalid is a problem with flag key's document. Every message
// reads `flag "KEY": FIELD: what is wrong; what is allowed`, FIELD being
// the path into the JSON document (rules[1].op), so that an operator
// finds the mistake from the message alone.
func flagInvalid(key, format string, a ...any) error {
	return &client.Error{Kind: client.ErrInvalidInput, Msg: fmt.Sprintf("flag %q: ", clip(key)) + fmt.Sprintf(format, a...)}
}

// clipAt is how much of a long user-supplied string a message quotes.
const clipAt = 32

// clip shortens s to clipAt bytes (on a rune boundary) and an ellipsis.
func clip(s string) string {
	if len(s) <= clipAt {
		return s
	}
	n := clipAt
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func validFlagKey(k string) error {
	if k == "" {
		return flagInvalid(k, "key: empty; a key is 1 to %d bytes", MaxFlagKey)
	}
	if len(k) > MaxFlagKey {
		return flagInvalid(k, "key: %d bytes; a key is 1 to %d bytes", len(k), MaxFlagKey)
	}
	for _, r := range k {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return flagInvalid(k, "key: %q is not allowed; a key has only letters, digits, '.', '_' and '-'", r)
		}
	}
	return nil
}

// compiledFlag is a validated flag ready to evaluate; immutable.
type compiledFlag struct {
	key      string
	typ      FlagType
	variants map[string]*flagVariant
	def, off *flagVariant
	enabled  bool
	rules    []compiledRule
	rollout  *flagVariant
	cutoff   uint32 // buckets below cutoff get rollout
	rev      int64
	err      error // a bad document in the store: evaluations fail
}

type flagVariant struct {
	name string
	raw  json.RawMessage
	b    bool
	s    string
	n    float64
	j    any
}

type compiledRule struct {
	attr    string
	op      string
	values  map[string]struct{}
	variant *flagVariant
}

// Validate checks f and returns the first problem as ErrInvalidInput.
func (f *Flag) Validate() error {
	_, err := compileFlag(f)
	return err
}

// flagTypes lists the type names a document may use, for messages.
const flagTypes = "bool, string, number or json (or OpenFeature's boolean, integer, float or object)"

func compileFlag(f *Flag) (*compiledFlag, error) {
	if err := validFlagKey(f.Key); err != nil {
		return nil, err
	}
	bad := func(format string, a ...any) error { return flagInvalid(f.Key, format, a...) }
	typ := f.Type.canonical()
	switch {
	case f.Type == "":
		return nil, bad("type: missing; it is %s", flagTypes)
	case typ == "":
		return nil, bad("type: %q is not %s", clip(string(f.Type)), flagTypes)
	}
	if n := len(f.Variants); n == 0 || n > MaxFlagVariants {
		return nil, bad("variants: %d given; a flag has 1 to %d variants", n, MaxFlagVariants)
	}
	// In name order, so that a document with several problems is
	// always refused for the same one.
	names := make([]string, 0, len(f.Variants))
	for name := range f.Variants {
		names = append(names, name)
	}
	sort.Strings(names)
	c := &compiledFlag{key: f.Key, typ: typ, variants: make(map[string]*flagVariant, len(f.Variants)), enabled: f.Enabled, rev: f.ModRevision}
	for _, name := range names {
		raw := f.Variants[name]
		if name == "" {
			return nil, bad("variants: a name is empty; a variant's name is 1 to %d bytes", MaxFlagKey)
		}
		if len(name) > MaxFlagKey {
			return nil, bad("variants[%q]: the name is %d bytes; a variant's name is 1 to %d bytes", clip(name), len(name), MaxFlagKey)
		}
		v := &flagVariant{name: name, raw: append(json.RawMessage(nil), raw...)}
		trimmed := bytes.TrimSpace(raw)
		if len(trimmed) == 0 {
			return nil, bad("variants[%q]: no value; it must be %s %s", name, article(f.Type), f.Type)
		}
		var err error
		switch typ {
		case FlagBool:
			err = json.Unmarshal(raw, &v.b)
		case FlagString:
			err = json.Unmarshal(raw, &v.s)
		case FlagNumber:
			err = json.Unmarshal(raw, &v.n)
		case FlagJSON:
			err = json.Unmarshal(raw, &v.j)
		}
		if err != nil || (typ != FlagJSON && bytes.Equal(trimmed, []byte("null"))) {
			return nil, bad("variants[%q]: %s is not %s %s", name, clip(string(trimmed)), article(f.Type), f.Type)
		}
		if f.Type == flagInteger && (v.n != math.Trunc(v.n) || math.Abs(v.n) > maxFlagInteger) {
			return nil, bad("variants[%q]: %s is not an integer (of at most 2^53 in magnitude)", name, clip(string(trimmed)))
		}
		c.variants[name] = v
	}
	ref := func(field, name string) (*flagVariant, error) {
		if v, ok := c.variants[name]; ok {
			return v, nil
		}
		if name == "" {
			return nil, bad("%s: missing; it must be one of the variants (%s)", field, listNames(names))
		}
		return nil, bad("%s: %q is not one of the variants (%s)", field, clip(name), listNames(names))
	}
	var err error
	if c.def, err = ref("defaultVariant", f.DefaultVariant); err != nil {
		return nil, err
	}
	if c.off, err = ref("offVariant", f.OffVariant); err != nil {
		return nil, err
	}
	if len(f.Rules) > MaxFlagRules {
		return nil, bad("rules: %d given; a flag has at most %d rules", len(f.Rules), MaxFlagRules)
	}
	for i, r := range f.Rules {
		field := fmt.Sprintf("rules[%d]", i)
		if r.Attribute == "" {
			return nil, bad("%s.attribute: empty; a rule names the attribute it matches", field)
		}
		switch r.Op {
		case OpEquals:
			if len(r.Values) != 1 {
				return nil, bad("%s.values: %d given; %s takes exactly 1", field, len(r.Values), r.Op)
			}
		case OpIn, OpNotIn:
			if len(r.Values) == 0 || len(r.Values) > MaxFlagValues {
				return nil, bad("%s.values: %d given; %s takes 1 to %d", field, len(r.Values), r.Op, MaxFlagValues)
			}
		case "":
			return nil, bad("%s.op: missing; it is eq, in or not_in", field)
		default:
			return nil, bad("%s.op: %q is not eq, in or not_in", field, clip(r.Op))
		}
		cr := compiledRule{attr: r.Attribute, op: r.Op, values: make(map[string]struct{}, len(r.Values))}
		for _, v := range r.Values {
			cr.values[v] = struct{}{}
		}
		if cr.variant, err = ref(field+".variant", r.Variant); err != nil {
			return nil, err
		}
		c.rules = append(c.rules, cr)
	}
	if f.Rollout != nil {
		if c.rollout, err = ref("rollout.variant", f.Rollout.Variant); err != nil {
			return nil, err
		}
		if err := validPercent(f.Key, f.Rollout.Percent); err != nil {
			return nil, err
		}
		c.cutoff = uint32(f.Rollout.Percent*100 + 0.5)
	}
	return c, nil
}

func validPercent(key string, p float64) error {
	if !(p >= 0 && p <= 100) {
		return flagInvalid(key, "rollout.percent: %v is not in 0..100", p)
	}
	return nil
}

// article is "a" or "an" for a type name.
func article(t FlagType) string {
	if strings.IndexByte("aeio", t[0]) >= 0 { // t is a valid type: never empty
		return "an"
	}
	return "a"
}

// listShown is how many variant names a message lists.
const listShown = 8

// listNames lists sorted names for a message, the first listShown.
func listNames(names []string) string {
	shown := names
	if len(names) > listShown {
		shown = names[:listShown]
	}
	q := make([]string, len(shown))
	for i, n := range shown {
		q[i] = clip(n)
	}
	s := strings.Join(q, ", ")
	if len(names) > listShown {
		s += fmt.Sprintf(" and %d more", len(names)-listShown)
	}
	return s
}

// FlagBucket is the sticky rollout bucket of targetingKey for flag key,
// in [0, FlagBuckets): FNV-1a (64 bit) of key, a 0 byte and
// targetingKey, modulo FlagBuckets. It depends on nothing else, so every
// instance and every release computes the same bucket, and a key inside
// a rollout of p% stays inside when p grows.
func FlagBucket(key, targetingKey string) uint32 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i := 0; i < len(key); i++ {
		h = (h ^ uint64(key[i])) * prime
	}
	h *= prime // the 0 separator
	for i := 0; i < len(targetingKey); i++ {
		h = (h ^ uint64(targetingKey[i])) * prime
	}
	return uint32(h % FlagBuckets)
}

func (c *compiledFlag) evaluate(targetingKey string, attrs map[string]string) (*flagVariant, Reason) {
	if !c.enabled {
		return c.off, ReasonDisabled
	}
	for i := range c.rules {
		r := &c.rules[i]
		v, ok := attrs[r.attr]
		hit := false
		if ok {
			_, hit = r.values[v]
		}
		if r.op == OpNotIn {
			hit = !hit
		}
		if hit {
			return r.variant, ReasonTargetingMatch
		}
	}
	if c.rollout != nil && targetingKey != "" && FlagBucket(c.key, targetingKey) < c.cutoff {
		return c.rollout, ReasonSplit
	}
	return c.def, ReasonDefault
}

// flagFields are a flag document's fields, for the message refusing
// an unknown one.
const flagFields = "key, type, variants, defaultVariant, offVariant, enabled, rules (attribute, op, values, variant) and rollout (variant, percent)"

// decodeFlagJSON decodes doc, a document of flag key, refusing unknown
// fields, with messages naming the field.
func decodeFlagJSON(key string, doc []byte) (*Flag, error) {
	var f Flag
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	err := dec.Decode(&f)
	if err == nil {
		return &f, nil
	}
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr) && strings.HasPrefix(typeErr.Value, "number "):
		return nil, flagInvalid(key, "%s: %s is out of range", typeErr.Field, strings.TrimPrefix(typeErr.Value, "number "))
	case errors.As(err, &typeErr) && typeErr.Field != "":
		return nil, flagInvalid(key, "%s: a JSON %s is not %s", typeErr.Field, typeErr.Value, jsonKind(typeErr.Type))
	case errors.As(err, &typeErr):
		return nil, flagInvalid(key, "the document is a JSON %s, not an object", typeErr.Value)
	case errors.As(err, &syntaxErr):
		return nil, flagInvalid(key, "not JSON: %s (at byte %d)", strings.TrimPrefix(err.Error(), "json: "), syntaxErr.Offset)
	case errors.Is(err, io.EOF):
		return nil, flagInvalid(key, "the document is empty")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return nil, flagInvalid(key, "not JSON: the document ends early")
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return nil, flagInvalid(key, "unknown field %s; the fields are %s", name, flagFields)
	}
	return nil, flagInvalid(key, "not a flag document: %v", err)
}

// jsonKind says what JSON a field of Go type t takes.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Float32, reflect.Float64, reflect.Int, reflect.Int64:
		return "a number"
	case reflect.Slice:
		return "an array"
	}
	return "an object"
}

// ParseFlag decodes doc, the JSON document of flag key, refusing
// unknown fields. A document without a key is given key; one with
// another key is refused. It does not validate the flag: SetFlag does.
func ParseFlag(key string, doc []byte) (*Flag, error) {
	f, err := decodeFlagJSON(key, doc)
	if err != nil {
		return nil, err
	}
	if f.Key == "" {
		f.Key = key
	}
	if f.Key != key {
		return nil, flagInvalid(key, "key: %q in the document, not %q", clip(f.Key), key)
	}
	return f, nil
}

// DecodeFlag parses a stored flag document; it must be valid.
func DecodeFlag(kv *client.KeyValue) (*Flag, error) {
	key := strings.TrimPrefix(kv.Key, FlagPrefix)
	f, err := decodeFlagJSON(key, kv.Value)
	if err != nil {
		return nil, err
	}
	if f.Key != key {
		if f.Key == "" {
			return nil, flagInvalid(key, "key: missing in the document stored under %s", kv.Key)
		}
		return nil, flagInvalid(key, "key: %q in the document stored under %s", clip(f.Key), kv.Key)
	}
	f.ModRevision = kv.ModRevision
	if err := f.Validate(); err != nil {
		return nil, err
	}
	f.Type = f.Type.canonical()
	return f, nil
}

// SetFlag validates f and writes it, with DKV's name for its type; it
// returns the write's revision.
func SetFlag(ctx context.Context, kv client.KV, f *Flag, opts ...client.OpOption) (int64, error) {
	c, err := compileFlag(f)
	if err != nil {
		return 0, err
	}
	doc := *f
	doc.Type = c.typ
	b, err := json.Marshal(&doc)
	if err != nil {
		return 0, flagInvalid(f.Key, "%v", err)
	}
	if len(b) > MaxFlagDocument {
		return 0, flagInvalid(f.Key, "the document is %d bytes; the limit is %d", len(b), MaxFlagDocument)
	}
	r, err := kv.Put(ctx, FlagPrefix+f.Key, b, opts...)
	if err != nil {
		return 0, err
	}
	return r.Revision, nil
}

// GetFlag reads one flag from the store.
func GetFlag(ctx context.Context, kv client.KV, key string) (*Flag, error) {
	if err := validFlagKey(key); err != nil {
		return nil, err
	}
	r, err := kv.Get(ctx, FlagPrefix+key)
	if err != nil {
		if errors.Is(err, client.ErrNotFound) {
			return nil, &client.Error{Kind: client.ErrNotFound, Msg: "flag " + key + " not found"}
		}
		return nil, err
	}
	return DecodeFlag(r)
}

// ListFlags reads every flag from the store, in key order. A document
// that is not a valid flag is returned in bad, keyed by its store key.
func ListFlags(ctx context.Context, kv client.KV) (flags []*Flag, bad map[string]error, err error) {
	r, err := kv.List(ctx, FlagPrefix)
	if err != nil {
		return nil, nil, err
	}
	for _, x := range r.KVs {
		f, err := DecodeFlag(x)
		if err != nil {
			if bad == nil {
				bad = map[string]error{}
			}
			bad[x.Key] = err
			continue
		}
		flags = append(flags, f)
	}
	return flags, bad, nil
}

// SetRollout sets the percentage of flag key's rollout (which must
// exist) by compare-and-set on the flag's ModRevision, retrying when a
// concurrent write got in first; it returns the write's revision. opts
// are added to the write: client.WithLock(h) fences it, as a canary
// controller's setPercent must (refused with client.ErrLocked once h is
// no longer current).
func SetRollout(ctx context.Context, kv client.KV, key string, percent float64, opts ...client.OpOption) (int64, error) {
	if err := validPercent(key, percent); err != nil {
		return 0, err
	}
	for {
		f, err := GetFlag(ctx, kv, key)
		if err != nil {
			return 0, err
		}
		if f.Rollout == nil {
			return 0, flagInvalid(key, "rollout: none; set one with SetFlag before changing its percent")
		}
		f.Rollout.Percent = percent
		rev, err := SetFlag(ctx, kv, f, append([]client.OpOption{client.IfModRevision(f.ModRevision)}, opts...)...)
		if errors.Is(err, client.ErrConflict) {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			continue
		}
		return rev, err
	}
}

// FlagsOption configures NewFlags.
type FlagsOption func(*flagsConfig)

type flagsConfig struct {
	cache []CacheOption
}

// WithFlagsCacheOptions passes options to the underlying Cache.
func WithFlagsCacheOptions(opts ...CacheOption) FlagsOption {
	return func(c *flagsConfig) { c.cache = append(c.cache, opts...) }
}

type flagSet struct {
	rev   int64
	flags map[string]*compiledFlag
}

// Flags evaluates feature flags locally, from a watch-backed Cache of
// FlagPrefix: no round trip per evaluation. The parsed flags are an
// immutable map swapped atomically after each change, so evaluations
// take no lock and allocate nothing.
type Flags struct {
	cache   *Cache
	started atomic.Bool
	mu      sync.Mutex // serialises rebuilds
	cur     atomic.Pointer[flagSet]
}

// NewFlags loads every flag and follows their changes until ctx ends or
// Close; after that, evaluations keep serving the last flags seen.
func NewFlags(ctx context.Context, w client.Watcher, opts ...FlagsOption) (*Flags, error) {
	var cfg flagsConfig
	for _, o := range opts {
		o(&cfg)
	}
	fl := &Flags{}
	fl.cur.Store(&flagSet{flags: map[string]*compiledFlag{}})
	changed := func() {
		if fl.started.Load() {
			fl.rebuild()
		}
	}
	h := CacheHandler{
		OnAdd:    func(*client.KeyValue) { changed() },
		OnUpdate: func(_, _ *client.KeyValue) { changed() },
		OnDelete: func(*client.KeyValue) { changed() },
	}
	c, err := NewCache(ctx, w, FlagPrefix, append(append([]CacheOption(nil), cfg.cache...), WithCacheHandler(h))...)
	if err != nil {
		return nil, err
	}
	fl.cache = c
	fl.started.Store(true)
	fl.rebuild()
	return fl, nil
}

// rebuild parses the cache's contents into a new flag set, reusing the
// parsed flags whose revision did not change.
func (fl *Flags) rebuild() {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	rev := fl.cache.Revision() // the listing below is at rev or later
	kvs := fl.cache.List(FlagPrefix)
	old := fl.cur.Load()
	next := &flagSet{rev: rev, flags: make(map[string]*compiledFlag, len(kvs))}
	for _, kv := range kvs {
		key := strings.TrimPrefix(kv.Key, FlagPrefix)
		if o, ok := old.flags[key]; ok && o.rev == kv.ModRevision {
			next.flags[key] = o
			continue
		}
		f, err := DecodeFlag(kv)
		var c *compiledFlag
		if err == nil {
			c, err = compileFlag(f)
		}
		if err != nil {
			c = &compiledFlag{key: key, rev: kv.ModRevision, err: err}
		}
		next.flags[key] = c
	}
	if next.rev < old.rev {
		next.rev = old.rev
	}
	fl.cur.Store(next)
}

// WaitForRevision waits until the evaluator reflects revision rev or
// later: after SetFlag returned rev, evaluations see that write.
func (fl *Flags) WaitForRevision(ctx context.Context, rev int64) error {
	if err := fl.cache.WaitForRevision(ctx, rev); err != nil {
		return err
	}
	if fl.cur.Load().rev < rev {
		fl.rebuild()
	}
	return nil
}

// Revision is the store revision the evaluator's flags are at.
func (fl *Flags) Revision() int64 { return fl.cur.Load().rev }

// Keys lists the flag keys the evaluator knows, sorted.
func (fl *Flags) Keys() []string {
	m := fl.cur.Load().flags
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Close stops following changes.
func (fl *Flags) Close() { fl.cache.Close() }

func (fl *Flags) eval(key, targetingKey string, attrs map[string]string, want FlagType) (*flagVariant, Reason, error) {
	v, r, _, err := fl.evalFlag(key, targetingKey, attrs, want)
	return v, r, err
}

// evalFlag evaluates against one flag set (one atomic load).
func (fl *Flags) evalFlag(key, targetingKey string, attrs map[string]string, want FlagType) (*flagVariant, Reason, *compiledFlag, error) {
	c, ok := fl.cur.Load().flags[key]
	if !ok {
		return nil, ReasonError, nil, ErrFlagNotFound
	}
	if c.err != nil {
		return nil, ReasonError, nil, c.err
	}
	if want != "" && c.typ != want {
		return nil, ReasonError, nil, ErrFlagType
	}
	v, r := c.evaluate(targetingKey, attrs)
	return v, r, c, nil
}

// Evaluate returns the variant flag key serves to targetingKey with
// attrs, and why. attrs may be nil.
func (fl *Flags) Evaluate(key, targetingKey string, attrs map[string]string) (variant string, reason Reason, err error) {
	v, r, err := fl.eval(key, targetingKey, attrs, "")
	if err != nil {
		return "", r, err
	}
	return v.name, r, nil
}

// FlagDetail is an evaluation with its value.
type FlagDetail struct {
	Type    FlagType
	Variant string
	Reason  Reason
	Bool    bool
	String  string
	Number  float64
	JSON    any // shared: do not modify
	Raw     json.RawMessage
}

// Detail evaluates flag key and returns its variant's value; want ""
// accepts any type.
func (fl *Flags) Detail(key, targetingKey string, attrs map[string]string, want FlagType) (FlagDetail, error) {
	v, r, c, err := fl.evalFlag(key, targetingKey, attrs, want)
	if err != nil {
		return FlagDetail{Reason: r}, err
	}
	return FlagDetail{Type: c.typ, Variant: v.name, Reason: r, Bool: v.b, String: v.s, Number: v.n, JSON: v.j, Raw: v.raw}, nil
}

// Bool evaluates a bool flag; def when it is missing, bad or not a bool.
func (fl *Flags) Bool(key, targetingKey string, attrs map[string]string, def bool) bool {
	v, _, err := fl.eval(key, targetingKey, attrs, FlagBool)
	if err != nil {
		return def
	}
	return v.b
}

// String evaluates a string flag; def when it is missing, bad or not a string.
func (fl *Flags) String(key, targetingKey string, attrs map[string]string, def string) string {
	v, _, err := fl.eval(key, targetingKey, attrs, FlagString)
	if err != nil {
		return def
	}
	return v.s
}

// Number evaluates a number flag; def when it is missing, bad or not a number.
func (fl *Flags) Number(key, targetingKey string, attrs map[string]string, def float64) float64 {
	v, _, err := fl.eval(key, targetingKey, attrs, FlagNumber)
	if err != nil {
		return def
	}
	return v.n
}

// JSON evaluates a json flag (the decoded value, shared: do not modify);
// def when it is missing, bad or not json.
func (fl *Flags) JSON(key, targetingKey string, attrs map[string]string, def any) any {
	v, _, err := fl.eval(key, targetingKey, attrs, FlagJSON)
	if err != nil {
		return def
	}
	return v.j
}
