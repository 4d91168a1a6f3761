package state

import (
	"testing"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// TestEveryCommandHasARow walks InternalRequest's oneof: every command
// kind the proto declares must have a row in the registry (Lookup), named
// after its field, that applies it one way or the other, and a client's
// message of that type must find the same row (CommandFor). A field added
// to the proto without a row fails here, not as an "unknown command" in
// production.
func TestEveryCommandHasARow(t *testing.T) {
	od := (&dkvpb.InternalRequest{}).ProtoReflect().Descriptor().Oneofs().ByName("request")
	if od == nil || od.Fields().Len() == 0 {
		t.Fatal("InternalRequest has no request oneof")
	}
	for i := 0; i < od.Fields().Len(); i++ {
		fd := od.Fields().Get(i)
		req := &dkvpb.InternalRequest{}
		rm := req.ProtoReflect()
		msg := rm.NewField(fd).Message()
		rm.Set(fd, protoreflect.ValueOfMessage(msg))
		c, carried := Lookup(req)
		if c == nil {
			t.Errorf("command %q (field %d, %s) has no row in the registry: add one beside its logic and a case to Lookup (command.go)", fd.Name(), fd.Number(), fd.Message().FullName())
			continue
		}
		if c.Name() != string(fd.Name()) {
			t.Errorf("field %q finds the row named %q", fd.Name(), c.Name())
		}
		if (c.write == nil) == (c.apply == nil) {
			t.Errorf("row %q must set exactly one of write and apply", c.Name())
		}
		if carried == nil || carried.ProtoReflect().Descriptor() != fd.Message() {
			t.Errorf("row %q: Lookup returns the carried message %T, want a %s", c.Name(), carried, fd.Message().FullName())
		}
		if got := CommandFor(msg.Interface()); got != c {
			t.Errorf("CommandFor(%s) = %q, want %q", fd.Message().FullName(), got.Name(), c.Name())
		}
	}
	if c, _ := Lookup(&dkvpb.InternalRequest{}); c != nil {
		t.Errorf("a request with no command finds row %q", c.Name())
	}
}
