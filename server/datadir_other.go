//go:build !unix

package server

import "os"

// Without flock the data dir is still protected by Pebble's own LOCK
// file, with a less helpful message.
func flock(*os.File) error { return nil }
func funlock(*os.File)     {}
