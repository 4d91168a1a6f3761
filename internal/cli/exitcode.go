package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/internal/backup"
	"github.com/dkv-io/dkv/internal/dkverr"
)

// Exit codes; keep in sync with exitCodeHelp and docs/cli.md.
const (
	exitOK            = 0
	exitError         = 1
	exitUsage         = 2
	exitNotFound      = 3
	exitConflict      = 4
	exitLocked        = 5
	exitInvalidInput  = 6
	exitUnavailable   = 7
	exitCompacted     = 8
	exitLeaseNotFound = 9
	exitNoSpace       = 10
	exitDataDamaged   = 11 // dkv serve: durable data damaged or lost
	exitPermission    = 12
	exitUnauth        = 13
	exitNoIndex       = 14
	exitThrottled     = 15
)

// usageError marks a command-line mistake: exit code 2.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func Usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

func isUsage(err error) bool {
	var u usageError
	if errors.As(err, &u) {
		return true
	}
	// cobra reports unknown subcommands without a hook to wrap them.
	msg := err.Error()
	return strings.HasPrefix(msg, "unknown command") || strings.HasPrefix(msg, "unknown flag") ||
		strings.HasPrefix(msg, "unknown shorthand flag")
}

// codes maps client errors to exit codes and the names printed in
// "Error: <name>: <message>". Unknown outcome comes first: it must not be
// mistaken for anything more definite.
var codes = []struct {
	err  error
	code int
	name string
}{
	{client.ErrUnknownOutcome, exitUnavailable, "Unavailable"},
	{client.ErrNotFound, exitNotFound, "NotFound"},
	{client.ErrConflict, exitConflict, "Conflict"},
	{client.ErrLocked, exitLocked, "Locked"},
	{client.ErrInvalidInput, exitInvalidInput, "InvalidInput"},
	{client.ErrUnavailable, exitUnavailable, "Unavailable"},
	{context.DeadlineExceeded, exitUnavailable, "Unavailable"},
	{client.ErrCompacted, exitCompacted, "Compacted"},
	{client.ErrLeaseNotFound, exitLeaseNotFound, "LeaseNotFound"},
	{client.ErrNoSpace, exitNoSpace, "NoSpace"},
	{dkverr.ErrDamaged, exitDataDamaged, "DataDamaged"},
	{backup.ErrDamaged, exitDataDamaged, "DataDamaged"},
	{client.ErrPermissionDenied, exitPermission, "PermissionDenied"},
	{client.ErrUnauthenticated, exitUnauth, "Unauthenticated"},
	{client.ErrNoIndex, exitNoIndex, "NoIndex"},
	{client.ErrThrottled, exitThrottled, "Throttled"},
}

func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	if isUsage(err) {
		return exitUsage
	}
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return exitError
}

// errorLine is what dkv prints on stderr for err: "Error: <code>:
// <message>", the message being the server's when there is one.
func errorLine(err error) string {
	for _, c := range codes {
		if !errors.Is(err, c.err) {
			continue
		}
		var ce *client.Error
		switch {
		case c.err == client.ErrUnknownOutcome:
			return fmt.Sprintf("Error: %s: %v", c.name, err)
		case errors.As(err, &ce) && ce.Msg != "":
			return fmt.Sprintf("Error: %s: %s", c.name, ce.Msg)
		default:
			// fmt.Errorf("%w: lock %q is held", client.ErrLocked, ...):
			// the name says "Locked" already, so drop "locked: ".
			msg := err.Error()
			if rest, ok := strings.CutPrefix(msg, c.err.Error()+": "); ok {
				msg = rest
			}
			return fmt.Sprintf("Error: %s: %s", c.name, msg)
		}
	}
	return fmt.Sprintf("Error: %v", err)
}
