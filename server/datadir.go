package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// dataDirLockFile, in the data directory, is held locked (flock) by the
// dkv process using the directory and holds its pid, so a second process
// is told who has it rather than Pebble's bare "resource temporarily
// unavailable" on its own LOCK file.
const dataDirLockFile = "dkv.pid"

// dirLock is a held data directory lock.
type dirLock struct{ f *os.File }

// errDirInUse is wrapped by the error lockDataDir returns when another
// process holds the directory.
var errDirInUse = errors.New("data dir in use")

func lockDataDir(dir string) (*dirLock, error) {
	path := filepath.Join(dir, dataDirLockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("data dir %s: %w", dir, err)
	}
	if err := flock(f); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		who := "another dkv process"
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && pid > 0 {
			who = fmt.Sprintf("another dkv process (pid %d)", pid)
		}
		return nil, fmt.Errorf("%w: data dir %s is in use by %s; stop it or choose another --data-dir (%v)", errDirInUse, dir, who, err)
	}
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		funlock(f)
		f.Close()
		return nil, fmt.Errorf("data dir %s: writing %s: %w", dir, dataDirLockFile, err)
	}
	return &dirLock{f: f}, nil
}

// release unlocks the directory. The pid file stays: a stale pid in it
// means nothing without the lock.
func (l *dirLock) release() {
	funlock(l.f)
	l.f.Close()
}
