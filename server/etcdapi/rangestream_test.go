package etcdapi_test

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

// RangeStream (etcd 3.7) answers what Range answers, in messages: merged,
// they are Range's reply; the kvs come in order, cut into several messages
// for a large range; header, count and more are on the last message only.
func TestRangeStreamIsRangeInChunks(t *testing.T) {
	n := startNode(t)
	ctx := ctxT(t)
	val := strings.Repeat("v", 4000)
	for i := range 600 { // about 2.4 MB: more than two messages
		if _, err := n.kv.Put(ctx, &etcdserverpb.PutRequest{Key: fmt.Appendf(nil, "rs/%04d", i), Value: []byte(val)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, req := range []*etcdserverpb.RangeRequest{
		{Key: []byte("rs/"), RangeEnd: []byte("rs0")},
		{Key: []byte("rs/"), RangeEnd: []byte("rs0"), Limit: 250},
		{Key: []byte("rs/"), RangeEnd: []byte("rs0"), CountOnly: true},
		{Key: []byte("rs/"), RangeEnd: []byte("rs0"), KeysOnly: true},
		{Key: []byte("none")},
		{Key: []byte("rs/"), RangeEnd: []byte("rs0"), Revision: 300},
	} {
		want, err := n.kv.Range(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		st, err := n.kv.RangeStream(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		merged := &etcdserverpb.RangeResponse{}
		var msgs int
		var last *etcdserverpb.RangeResponse
		for {
			m, err := st.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%v: RangeStream: %v", req, err)
			}
			msgs++
			if last != nil && (last.Header != nil || last.Count != 0 || last.More) {
				t.Errorf("%v: message %d carries header, count or more but is not the last", req, msgs-1)
			}
			last = m.GetRangeResponse()
			proto.Merge(merged, last)
		}
		if !proto.Equal(merged, want) {
			t.Errorf("%v: merged RangeStream %d kvs count %d more %v rev %d; Range %d kvs count %d more %v rev %d",
				req, len(merged.Kvs), merged.Count, merged.More, merged.GetHeader().GetRevision(), len(want.Kvs), want.Count, want.More, want.GetHeader().GetRevision())
		}
		if len(want.Kvs) == 600 && !req.KeysOnly && msgs < 3 {
			t.Errorf("%v: 2.4 MB of values came in %d messages, want them cut (about 1 MiB each)", req, msgs)
		}
	}
	// Refused as Range is: an empty key.
	st, err := n.kv.RangeStream(ctx, &etcdserverpb.RangeRequest{})
	if err == nil {
		_, err = st.Recv()
	}
	if err == nil || !strings.Contains(err.Error(), "key is not provided") {
		t.Errorf("RangeStream of an empty key: %v, want etcd's empty-key error", err)
	}
}
