package storekeys

import (
	"bytes"
	"regexp"

	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/keyrange"
)

// Reserved is the first physical key of the named stores: every key at or
// after it belongs to one.
const Reserved = "\xff\xff\xffdkv/stores/"

var (
	reserved = []byte(Reserved)
	nameRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
)

// ValidName checks a named store's name ("" is the default store and is
// not a name).
func ValidName(name string) error {
	if !nameRE.MatchString(name) {
		return dkverr.New(dkverr.InvalidInput, "store name %q is invalid: it must match [a-z0-9][a-z0-9._-]{0,62}", name)
	}
	return nil
}

// Prefix is the physical prefix of a named store's keys.
func Prefix(name string) []byte {
	p := make([]byte, 0, len(reserved)+len(name)+1)
	return append(append(append(p, reserved...), name...), '/')
}

// StoreOf is the named store a physical key belongs to; ok is false for a
// default-store key or a malformed one.
func StoreOf(k []byte) (name string, ok bool) {
	if !bytes.HasPrefix(k, reserved) {
		return "", false
	}
	rest := k[len(reserved):]
	i := bytes.IndexByte(rest, '/')
	if i <= 0 {
		return "", false
	}
	return string(rest[:i]), true
}

// Mapper maps the keys of one store. The zero Mapper is the default
// store's.
type Mapper struct {
	name string
	pre  []byte // nil for the default store
}

// For is the Mapper of store name ("" for the default store).
func For(name string) (Mapper, error) {
	if name == "" {
		return Mapper{}, nil
	}
	if err := ValidName(name); err != nil {
		return Mapper{}, err
	}
	return Mapper{name: name, pre: Prefix(name)}, nil
}

// Name is the store's name, "" for the default store.
func (m Mapper) Name() string { return m.name }

// Default reports whether m is the default store's.
func (m Mapper) Default() bool { return m.pre == nil }

func reservedErr(what string, k []byte) error {
	return dkverr.New(dkverr.InvalidInput, "%s %q is in the named stores' reserved range (keys from %q on): use a named store (--store, client.Config.Store) instead", what, k, Reserved)
}

// Key is the physical key of k. An empty key stays empty (validation
// refuses it later with its usual message).
func (m Mapper) Key(k []byte) ([]byte, error) {
	if m.pre == nil {
		if bytes.Compare(k, reserved) >= 0 {
			return nil, reservedErr("key", k)
		}
		return k, nil
	}
	if len(k) == 0 {
		return k, nil
	}
	return m.join(k), nil
}

func (m Mapper) join(k []byte) []byte {
	p := make([]byte, 0, len(m.pre)+len(k))
	return append(append(p, m.pre...), k...)
}

// Range maps a span (key, range_end, prefix) with DKV's range semantics:
// empty end and no prefix is the single key; end "\x00" is every key from
// key on; prefix is every key starting with key. The result stays inside
// the store's keys; a default-store prefix or end that would reach the
// named stores is turned into an explicit end at Reserved.
func (m Mapper) Range(key, end []byte, prefix bool) ([]byte, []byte, bool, error) {
	if len(end) == 0 && !prefix {
		k, err := m.Key(key)
		return k, nil, false, err
	}
	if m.pre == nil {
		if bytes.Compare(key, reserved) >= 0 {
			return nil, nil, false, reservedErr("range start", key)
		}
		if prefix {
			end = keyrange.PrefixEnd(key)
			if end == nil { // the empty key or all 0xff: every key from key on
				end = []byte{0}
			}
			prefix = false
		}
		if isAllKeys(end) || bytes.Compare(end, reserved) > 0 {
			end = append([]byte(nil), reserved...)
		}
		return key, end, false, nil
	}
	k := m.join(key)
	if prefix {
		return k, nil, true, nil
	}
	if isAllKeys(end) {
		return k, keyrange.PrefixEnd(m.pre), false, nil
	}
	return k, m.join(end), false, nil
}

func isAllKeys(end []byte) bool { return len(end) == 1 && end[0] == 0 }

// Strip is the store key of physical key k; ok is false when k is not one
// of the store's keys.
func (m Mapper) Strip(k []byte) ([]byte, bool) {
	if m.pre == nil {
		return k, bytes.Compare(k, reserved) < 0
	}
	if !bytes.HasPrefix(k, m.pre) {
		return nil, false
	}
	return k[len(m.pre):], true
}

// strip is Strip for a key of a reply to a mapped request, which is the
// store's; should one not be, it is blanked rather than shown.
func (m Mapper) strip(k []byte) []byte {
	s, ok := m.Strip(k)
	if !ok {
		return nil
	}
	return s
}

// KeyPrefix is the physical prefix of the store's key prefix p (a
// query's or an index's): every physical key starting with it is a key of
// the store starting with p, except that the default store's empty
// prefix also covers the named stores' keys (filter the results with
// KVs).
func (m Mapper) KeyPrefix(p []byte) ([]byte, error) {
	if m.pre == nil {
		if bytes.Compare(p, reserved) >= 0 {
			return nil, reservedErr("prefix", p)
		}
		return p, nil
	}
	return m.join(p), nil
}

// Span is the physical span [start, end) of every key of the store.
func (m Mapper) Span() (start, end []byte) {
	if m.pre == nil {
		return nil, reserved
	}
	return m.pre, keyrange.PrefixEnd(m.pre)
}
