// Package lock is the persistent lock table of DKV's state machine: who
// holds each locked key (with its fencing token and lease), the FIFO queue
// of waiters per key, and an index from leases to the keys they hold or
// wait on. internal/mvcc drives it from its apply loop, in the same Pebble
// batch as the key writes the locks guard, so granting, releasing,
// expiring and enforcing a lock are atomic with those writes.
//
// Like the rest of the state machine it is pure: no clock, no randomness,
// no map iteration; the same commands give byte-identical state.
//
// # Key layout (prefix "s/k"; <k> is uvarint(len(key)) followed by key)
//
//	s/kh/<k>               holder: uvarint token, uvarint lease, flags, owner
//	s/kt/<k>               last fencing token granted for the key (kept forever)
//	s/kq/<k><seq8>         waiter, FIFO by seq: uvarint lease, flags, owner
//	s/ko/<k><owner>        seq8 of owner's waiter entry (waiters only)
//	s/kl/<lease8><key>     uvarint count of holder+waiter entries of the
//	                       lease on key
//	s/km/seq               last waiter seq
//	s/kg/<k>               the current grant's store revision and raft
//	                       entry time (uvarints; time 0 if the entry had none)
//
// # Invariants
//
//   - A key with waiters has a holder: a release grants the lock to the
//     first waiter in the same command.
//   - Every holder and waiter lives on a lease that exists: revoking a
//     lease removes its waiters and releases its locks in the same command.
//   - Fencing tokens are strictly increasing per key (s/kt never moves
//     back and is never deleted).
package lock
