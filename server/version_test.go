package server_test

import (
	"strings"
	"testing"

	"github.com/dkv-io/dkv/server"
)

// TestVersionsCompatible is the version rule of docs/operations.md:
// same major, minor at most one apart, patch and suffix ignored.
func TestVersionsCompatible(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want string // "" compatible, else part of the error
	}{
		{"0.1.0", "0.1.7", ""},
		{"0.1.0", "0.2.0", ""},
		{"0.2.3", "0.1.0", ""},
		{"0.1.0-dev", "0.2.1", ""},
		{"1.4", "1.5.0", ""},
		{"0.1.0", "0.3.0", "2 minor versions apart"},
		{"0.4.0", "0.1.9", "3 minor versions apart"},
		{"1.0.0", "2.0.0", "different major versions"},
		{"1.9.0", "2.0.0", "different major versions"},
		{"0.1.0", "banana", `version "banana" is not major.minor.patch`},
		{"0.1.0", "1.x.0", `version "1.x.0" is not major.minor.patch`},
		{"", "0.1.0", `version "" is not major.minor.patch`},
	} {
		err := server.VersionsCompatible(c.a, c.b)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s with %s: %v, want compatible", c.a, c.b, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s with %s: %v, want an error naming %q", c.a, c.b, err, c.want)
		}
	}
	if err := server.VersionsCompatible(server.Version, server.Version); err != nil {
		t.Errorf("this build's version %q: %v", server.Version, err)
	}
}
