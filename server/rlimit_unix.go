//go:build linux || darwin

package server

import "syscall"

// raiseNoFile raises the open-file soft limit to the hard limit where the
// system allows it, and returns the limits in force.
func raiseNoFile() (soft, hard uint64, ok bool) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, 0, false
	}
	if rl.Cur < rl.Max {
		up := rl
		up.Cur = up.Max
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &up) == nil {
			rl = up
		} else if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) != nil {
			return 0, 0, false
		}
	}
	return rl.Cur, rl.Max, true
}
