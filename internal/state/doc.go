// Package state is DKV's replicated state machine: every committed raft
// command is applied here, deterministically, on every member.
package state
