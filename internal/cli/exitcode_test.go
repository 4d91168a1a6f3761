package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/internal/storage"
)

func TestExitCodes(t *testing.T) {
	srv := func(kind error, msg string) error { return &client.Error{Kind: kind, Msg: msg} }
	for _, tc := range []struct {
		err  error
		code int
		line string
	}{
		{nil, 0, ""},
		{errors.New("boom"), 1, "Error: boom"},
		{Usagef("bad flag"), 2, ""},
		{errors.New(`unknown command "frob" for "dkv"`), 2, ""},
		{srv(client.ErrNotFound, `key "a" not found`), 3, `Error: NotFound: key "a" not found`},
		{srv(client.ErrConflict, "key exists"), 4, "Error: Conflict: key exists"},
		{srv(client.ErrLocked, "held by 7"), 5, "Error: Locked: held by 7"},
		{fmt.Errorf("put: %w", srv(client.ErrInvalidInput, "key is 5120 bytes, over the 4096-byte limit")), 6, "Error: InvalidInput: key is 5120 bytes, over the 4096-byte limit"},
		{srv(client.ErrUnavailable, "no leader"), 7, "Error: Unavailable: no leader"},
		{context.DeadlineExceeded, 7, "Error: Unavailable: context deadline exceeded"},
		{fmt.Errorf("%w: %w", client.ErrUnknownOutcome, context.DeadlineExceeded), 7, "Error: Unavailable: outcome unknown"},
		{srv(client.ErrCompacted, "revision 3 compacted"), 8, "Error: Compacted: revision 3 compacted"},
		{srv(client.ErrLeaseNotFound, "lease 9"), 9, "Error: LeaseNotFound: lease 9"},
		{srv(client.ErrNoSpace, "member 1f: free 3 MiB < reserve 64 MiB"), 10, "Error: NoSpace: member 1f: free 3 MiB < reserve 64 MiB"},
		{srv(client.ErrPermissionDenied, `user "alice" lacks read permission on key "x"`), 12, `Error: PermissionDenied: user "alice" lacks read permission on key "x"`},
		{srv(client.ErrUnauthenticated, "token expired"), 13, "Error: Unauthenticated: token expired"},
		{srv(client.ErrInternal, "disk on fire"), 1, "Error: internal server error: disk on fire"},
		{fmt.Errorf("starting: %w", &storage.DamageError{Dir: "d", Problem: "x"}), 11, "Error: DataDamaged: starting: data dir d is damaged: x"},
	} {
		if got := exitCode(tc.err); got != tc.code {
			t.Errorf("exitCode(%v) = %d, want %d", tc.err, got, tc.code)
		}
		if tc.err != nil && tc.line != "" && !strings.HasPrefix(errorLine(tc.err), tc.line) {
			t.Errorf("errorLine(%v) = %q, want prefix %q", tc.err, errorLine(tc.err), tc.line)
		}
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{
		{"frobnicate"},
		{"put", "only-key"},
		{"get"},
		{"get", "k", "--rev", "abc"},
		{"get", "k", "--no-such-flag"},
		{"counter", "add", "k", "one"},
		{"compact", "x"},
		{"get", "k", "-o", "yaml"},
		{"counter"},
		{"proxy", "--read-cache-bytes", "-1"},
	} {
		var out, errb bytes.Buffer
		if code := Run(args, strings.NewReader(""), &out, &errb); code != exitUsage {
			t.Errorf("dkv %q: exit %d, want 2 (stderr %q)", args, code, errb.String())
		}
		if !strings.HasPrefix(errb.String(), "Error: usage: ") {
			t.Errorf("dkv %q: stderr %q", args, errb.String())
		}
	}
}

func TestHelpListsExitCodes(t *testing.T) {
	var out bytes.Buffer
	if code := Run([]string{"--help"}, nil, &out, &out); code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	for _, want := range []string{"Exit codes:", "3  NotFound", "4  Conflict", "7  Unavailable", "9  LeaseNotFound", "11  DataDamaged"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q:\n%s", want, out.String())
		}
	}
}

// Without a reachable server, a command fails fast with Unavailable.
func TestNoServerIsUnavailable(t *testing.T) {
	var out, errb bytes.Buffer
	code := Run([]string{"--endpoints", "127.0.0.1:1", "--timeout", "300ms", "get", "k"}, nil, &out, &errb)
	if code != exitUnavailable || !strings.HasPrefix(errb.String(), "Error: Unavailable: ") {
		t.Fatalf("exit %d stderr %q, want 7 Unavailable", code, errb.String())
	}
}
