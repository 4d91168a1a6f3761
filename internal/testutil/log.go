package testutil

import "log/slog"

// Quiet is a logger that drops everything, to keep test output readable;
// a test that asserts on logs gives the node its own handler.
var Quiet = slog.New(slog.DiscardHandler)
