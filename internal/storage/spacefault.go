package storage

import (
	"sync/atomic"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// FaultFS wraps a vfs.FS for disk-full tests: while Full is set every
// write fails with ENOSPC; FailNext makes only the next n writes fail (a
// disk that had a little room freed); Avail, when > 0, is the free space
// GetDiskUsage reports. Usage, when set (before the FS is used), has the
// last word on what GetDiskUsage reports: a test models a disk whose free
// space follows the files on it (the ballast's, say) with it.
type FaultFS struct {
	vfs.FS
	Full     atomic.Bool
	FailNext atomic.Int32
	Avail    atomic.Int64
	Usage    func(path string, du vfs.DiskUsage) vfs.DiskUsage
}

// NewFaultFS wraps fs (vfs.Default if nil).
func NewFaultFS(fs vfs.FS) *FaultFS { return &FaultFS{FS: defaultFS(fs)} }

func (f *FaultFS) fail() bool {
	if f.Full.Load() {
		return true
	}
	for {
		n := f.FailNext.Load()
		if n <= 0 {
			return false
		}
		if f.FailNext.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

func (f *FaultFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if f.fail() {
		return nil, &pathError{"create", name}
	}
	file, err := f.FS.Create(name, c)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: file, fs: f}, nil
}

func (f *FaultFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	file, err := f.FS.ReuseForWrite(oldname, newname, c)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: file, fs: f}, nil
}

func (f *FaultFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	file, err := f.FS.OpenReadWrite(name, c, opts...)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: file, fs: f}, nil
}

func (f *FaultFS) GetDiskUsage(path string) (vfs.DiskUsage, error) {
	du, err := f.FS.GetDiskUsage(path)
	if a := f.Avail.Load(); a > 0 {
		du.AvailBytes = uint64(a)
		if du.TotalBytes < du.AvailBytes {
			du.TotalBytes = du.AvailBytes
		}
		err = nil
	}
	if f.Usage != nil && err == nil {
		du = f.Usage(path, du)
	}
	return du, err
}

func (f *FaultFS) Unwrap() vfs.FS { return f.FS }

type faultFile struct {
	vfs.File
	fs *FaultFS
}

func (f *faultFile) Write(p []byte) (int, error) {
	if f.fs.fail() {
		return 0, syscall.ENOSPC
	}
	return f.File.Write(p)
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	if f.fs.fail() {
		return 0, syscall.ENOSPC
	}
	return f.File.WriteAt(p, off)
}

func (f *faultFile) Preallocate(off, n int64) error {
	if f.fs.fail() {
		return syscall.ENOSPC
	}
	return f.File.Preallocate(off, n)
}

type pathError struct{ op, path string }

func (e *pathError) Error() string { return e.op + " " + e.path + ": " + syscall.ENOSPC.Error() }
func (e *pathError) Unwrap() error { return syscall.ENOSPC }
