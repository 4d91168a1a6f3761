package runner

import "context"

// PreloadWindow is the most batches a preload has in flight at once
// (both `dkv bench` and bench/compare's etcd preload use at most 64
// writers). ResumeFrom relies on it.
const PreloadWindow = 64

// ResumeFrom says from which batch a preload that was cut off can start
// again, so that a multi-million-key preload stopped by its time bound (or
// a failed member) does not begin again from its first key.
//
// A preload writes batches 0, 1, 2, ... of per consecutive keys, each in
// one atomic txn, handing the next batch to whichever of at most
// PreloadWindow writers is free. So when it stops, batches [0, L) are all
// written, some of [L, L+PreloadWindow) are, and none after them; and
// batch j is written exactly when key j*per is present (present(k)).
// A binary search over present finds a boundary f in [L, L+PreloadWindow],
// so every batch below f-PreloadWindow is written. That claim is checked
// before it is trusted: count(n), the keys present among keys [0, n),
// must be all of batches [0, b) (the key space may have been written some
// other way, say by random puts, which leave holes). If the check fails,
// the preload starts from batch 0.
//
// It returns a batch index in [0, batches]; batches themselves are not
// written here.
func ResumeFrom(ctx context.Context, batches, per int,
	present func(ctx context.Context, key int) (bool, error),
	count func(ctx context.Context, keys int) (int64, error),
) (int, error) {
	lo, hi := 0, batches
	for lo < hi {
		mid := lo + (hi-lo)/2
		ok, err := present(ctx, mid*per)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	from := max(0, lo-PreloadWindow)
	if from == 0 {
		return 0, nil
	}
	n, err := count(ctx, from*per)
	if err != nil {
		return 0, err
	}
	if n != int64(from*per) {
		return 0, nil
	}
	return from, nil
}
