//go:build !linux && !darwin

package server

// raiseNoFile: no RLIMIT_NOFILE to check on this platform.
func raiseNoFile() (soft, hard uint64, ok bool) { return 0, 0, false }
