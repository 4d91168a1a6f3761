package grpcapi

// SetLockRecheckHook sets the hook a waiting Acquire runs between reading
// the lock's holder and its queue (nil: none).
func SetLockRecheckHook(f func()) { lockRecheckHook = f }
