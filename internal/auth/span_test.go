package auth

import "testing"

func TestSpanOf(t *testing.T) {
	for _, c := range []struct {
		key, end string
		prefix   bool
		want     string
	}{
		{"a", "", false, `key "a"`},
		{"a", "\x00", false, `every key >= "a"`},
		{"app/", "", true, `prefix "app/"`},
		{"", "", true, `every key >= ""`},
		{"a", "c", false, `range ["a", "c")`},
		{"c", "a", false, `key "c"`}, // malformed: never "nothing"
		{"\xff", "", true, `every key >= "\xff"`},
	} {
		if got := SpanOf([]byte(c.key), []byte(c.end), c.prefix).String(); got != c.want {
			t.Errorf("SpanOf(%q, %q, %v) = %s, want %s", c.key, c.end, c.prefix, got, c.want)
		}
	}
}

func TestCovers(t *testing.T) {
	pfx := func(p string) Span { return SpanOf([]byte(p), nil, true) }
	rng := func(a, b string) Span { return SpanOf([]byte(a), []byte(b), false) }
	key := func(k string) Span { return Key([]byte(k)) }
	from := func(k string) Span { return SpanOf([]byte(k), []byte{0}, false) }
	for _, c := range []struct {
		name  string
		perms []Span
		want  Span
		ok    bool
	}{
		{"no permissions", nil, key("a"), false},
		{"exact key", []Span{key("a")}, key("a"), true},
		{"other key", []Span{key("a")}, key("b"), false},
		{"key is not its prefix", []Span{key("a")}, pfx("a"), false},
		{"key under prefix", []Span{pfx("app/")}, key("app/x"), true},
		{"prefix itself", []Span{pfx("app/")}, pfx("app/"), true},
		{"sub prefix", []Span{pfx("app/")}, pfx("app/x/"), true},
		{"key outside prefix", []Span{pfx("app/")}, key("other/x"), false},
		{"empty prefix needs everything", []Span{pfx("app/")}, pfx(""), false},
		{"from-key inside prefix is open-ended", []Span{pfx("app/")}, from("app/"), false},
		{"from-key with from-key perm", []Span{from("app/")}, from("app/x"), true},
		{"from-key before perm start", []Span{from("b")}, from("a"), false},
		{"everything covers all", []Span{pfx("")}, from(""), true},
		{"range inside", []Span{rng("a", "m")}, rng("b", "c"), true},
		{"range crossing end", []Span{rng("a", "m")}, rng("l", "n"), false},
		{"range end exclusive", []Span{rng("a", "m")}, key("m"), false},
		{"two touching ranges join", []Span{rng("a", "c"), rng("c", "e")}, rng("b", "d"), true},
		{"gap between ranges", []Span{rng("a", "c"), rng("d", "f")}, rng("b", "e"), false},
		{"overlapping, unsorted", []Span{rng("d", "f"), rng("a", "e")}, rng("b", "f"), true},
		{"keys adjacent", []Span{key("a"), key("a\x00")}, rng("a", "a\x00\x00"), true},
		{"prefix of 0xff is open", []Span{pfx("\xff")}, from("\xff\x01"), true},
	} {
		if got := Covers(Merge(c.perms), c.want); got != c.ok {
			t.Errorf("%s: Covers(%v, %v) = %v, want %v", c.name, c.perms, c.want, got, c.ok)
		}
	}
}
