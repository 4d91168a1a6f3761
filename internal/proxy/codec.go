package proxy

import (
	"fmt"

	"google.golang.org/protobuf/proto"
)

// frame is a message the proxy passes through without decoding.
type frame struct{ b []byte }

// codec is the proxy's gRPC codec on both sides: a frame is moved as its
// bytes, anything else (the Watch service the proxy answers itself) is
// protobuf. It keeps the name "proto", so nothing on the wire changes.
type codec struct{}

func (codec) Marshal(v any) ([]byte, error) {
	switch m := v.(type) {
	case *frame:
		return m.b, nil
	case proto.Message:
		return proto.Marshal(m)
	}
	return nil, fmt.Errorf("proxy codec: cannot marshal %T", v)
}

func (codec) Unmarshal(data []byte, v any) error {
	switch m := v.(type) {
	case *frame:
		// gRPC may reuse data's buffer once Unmarshal returns.
		m.b = append([]byte(nil), data...)
		return nil
	case proto.Message:
		return proto.Unmarshal(data, m)
	}
	return fmt.Errorf("proxy codec: cannot unmarshal into %T", v)
}

func (codec) Name() string { return "proto" }
