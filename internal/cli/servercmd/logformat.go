package servercmd

import (
	"io"
	"log/slog"

	"github.com/dkv-io/dkv/internal/cli"
)

// newServeLogger is dkv serve's logger for --log-format: slog's text
// handler (key=value, the default) or its JSON handler (one object a line
// with "time", "level", "msg" and the attributes, for log shippers).
func newServeLogger(w io.Writer, format string) (*slog.Logger, error) {
	switch format {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, nil)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, nil)), nil
	}
	return nil, cli.Usagef("--log-format %q: want text or json", format)
}
