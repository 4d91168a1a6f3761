// Package ratelimit is the state machine's exact rate limiter: GCRA (the
// generic cell rate algorithm, a token bucket kept as one timestamp) per
// key, applied as one raft command per decision.
//
// Who calls it: package state applies dkvpb.RateLimitRequest commands
// through Apply; package mvcc's Validate and the server call Validate
// before proposing.
//
// Invariants: Decide is pure integer arithmetic on its arguments (no
// clock, no floats), so every member computes the same decision from the
// same entry. Time comes from the entry (InternalRequest.time_unix_nano,
// stamped by the proposing member) and is clamped so that it never goes
// backwards on a key: a proposer whose clock is behind decides at the
// latest time the key has seen; one whose clock is ahead by s gives a key
// at most min(burst, s/T) extra tokens, once. Over any interval of decision times of
// length W, the tokens allowed on a key are at most burst + W/T, where T,
// the emission interval, is period/limit rounded up: never more than the
// stated rate. State lives under keys.RateLimitPrefix, inside the
// replicated span, so raft snapshots carry it.
package ratelimit
