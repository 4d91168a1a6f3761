// Package queuekeys is the one description of the job queue's key layout
// (client/recipe's Queue): the client writes it, the server's /metrics
// collector reads it, and both must agree byte for byte.
//
// Under a queue's prefix P = Root + <name> + "/":
//
//	P j/<order>   a waiting job (visible, scheduled or claimed)
//	P c/<order>   the claim marker of j/<order>, on the claim's lease
//	P d/<id>      a dead-lettered job
//	P i/<key>     an idempotency key, on a lease of the window
//	P c/paused    present while the queue is paused
//
// <order> is <priority><run-at ms><id> in fixed-width hex (8, 16, then
// the 24 of <id>), and <id> is <enqueue nanos, 16 hex><random, 8 hex>.
//
// The bytes are a stored format: changing one orphans every existing
// queue. Add, never edit.
package queuekeys

import (
	"fmt"
	"strconv"
)

// Root is the prefix of every queue's keys.
const Root = "dkv.queue/"

// Sub-prefixes and keys under a queue's prefix.
const (
	Jobs   = "j/"
	Claims = "c/"
	Dead   = "d/"
	Idem   = "i/"
	Paused = "c/paused"
)

// Lengths of the encoded id and order.
const (
	IDLen    = 16 + 8
	OrderLen = 8 + 16 + IDLen
)

// Prefix is the key prefix under which queue name keeps its state.
func Prefix(name string) string { return Root + name + "/" }

// Order encodes a job's claim order: higher priority first, then earlier
// run-at, then earlier id.
func Order(priority int32, runAtMs int64, id string) string {
	// Flip the sign bit so the encoding sorts like the signed number, then
	// invert so higher priorities sort first.
	p := ^(uint32(priority) ^ 0x80000000)
	return fmt.Sprintf("%08x%016x%s", p, uint64(max(runAtMs, 0)), id)
}

// OrderKey is a decoded <order>.
type OrderKey struct {
	Order    string
	Priority int32
	RunAtMs  int64
	ID       string
	EnqNanos int64 // the enqueue time, from the id
}

// ParseOrder decodes an <order>; false if s is not one.
func ParseOrder(s string) (OrderKey, bool) {
	if len(s) != OrderLen {
		return OrderKey{}, false
	}
	p, err1 := strconv.ParseUint(s[:8], 16, 32)
	r, err2 := strconv.ParseUint(s[8:24], 16, 64)
	e, err3 := strconv.ParseUint(s[24:40], 16, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return OrderKey{}, false
	}
	return OrderKey{Order: s, Priority: int32(^uint32(p) ^ 0x80000000), RunAtMs: int64(r), ID: s[24:], EnqNanos: int64(e)}, true
}
