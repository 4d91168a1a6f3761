package chaos

import (
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// OpKind is the kind of one KV operation in a history.
type OpKind uint8

const (
	OpGet OpKind = iota
	OpPut
	OpDelete
	// OpCAS is a transaction: if the key's value equals Expect (or the key
	// is missing, with ExpectAbsent) then put Value.
	OpCAS
	// OpCounter adds Delta to a counter bounded to [Min, Max].
	OpCounter
)

var opNames = [...]string{"get", "put", "delete", "cas", "counter"}

func (k OpKind) String() string { return opNames[k] }

// Input is what a client asked for. Every operation touches one key,
// which is what lets the model be partitioned per key.
type Input struct {
	Kind   OpKind
	Key    string
	Value  string // put, CAS: the new value
	Expect string // CAS: the expected value
	// ExpectAbsent makes a CAS expect the key to be missing.
	ExpectAbsent    bool
	Delta, Min, Max int64 // counter
	// Window is the history window the key belongs to (see KVWorkload).
	Window int
}

// Output is what the client saw.
type Output struct {
	// Unknown: the operation may or may not have taken effect (a timeout
	// or a broken connection after the request was sent).
	Unknown bool
	// OK: a CAS succeeded; a counter add stayed within its bounds.
	OK bool
	// Exists and Value: a get's result; Value is also a counter's new
	// value.
	Exists bool
	Value  string
	// Deleted is how many keys a delete removed.
	Deleted int64
}

// pending marks the return time of an operation with an unknown outcome
// until the history is closed.
const pending = -1

// Recorder collects a run's history. It is safe for concurrent use.
type Recorder struct {
	mu      sync.Mutex
	start   time.Time
	ops     []porcupine.Operation
	streams map[string][]any
}

// NewRecorder starts a history; timestamps are relative to now.
func NewRecorder() *Recorder {
	return &Recorder{start: time.Now(), streams: map[string][]any{}}
}

// Now is the recorder's monotonic timestamp, in nanoseconds.
func (r *Recorder) Now() int64 { return int64(time.Since(r.start)) }

// Record adds a completed operation. An Output with Unknown set is given
// an open-ended return time: porcupine may linearize it anywhere after
// its call, including after every other operation, which is the same as
// it never having happened.
func (r *Recorder) Record(client int, in Input, call int64, out Output, ret int64) {
	if out.Unknown {
		ret = pending
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
}

// Append records an event of another kind (lock grants, watch events,
// lease keep-alives...) under stream, for that stream's checker.
func (r *Recorder) Append(stream string, ev any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.streams[stream] = append(r.streams[stream], ev)
}

// Stream returns a copy of the events recorded under stream.
func (r *Recorder) Stream(stream string) []any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]any(nil), r.streams[stream]...)
}

// Operations returns the KV history with unknown outcomes closed at the
// latest timestamp seen, so they overlap everything after their call.
func (r *Recorder) Operations() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	end := r.Now() + 1
	out := make([]porcupine.Operation, len(r.ops))
	for i, op := range r.ops {
		if op.Return == pending {
			op.Return = end
		}
		out[i] = op
	}
	return out
}

// Len is the number of KV operations recorded.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ops)
}
