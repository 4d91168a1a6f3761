package proxy

import (
	"testing"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

// TestHeaderRevision: the cache reads and rewrites the revision of DKV's
// and etcd's Range responses without decoding them, and leaves every
// other field as it was.
func TestHeaderRevision(t *testing.T) {
	d := &dkvpb.RangeResponse{Header: &dkvpb.ResponseHeader{ClusterId: 7, MemberId: 8, Revision: 5, RaftTerm: 9},
		Kvs: []*dkvpb.KeyValue{{Key: []byte("k"), Value: []byte("v"), ModRevision: 4}}, Count: 1}
	e := &etcdserverpb.RangeResponse{Header: &etcdserverpb.ResponseHeader{ClusterId: 7, MemberId: 8, Revision: 5, RaftTerm: 9}, Count: 3, More: true}
	for _, c := range []struct {
		msg, out proto.Message
	}{
		{d, &dkvpb.RangeResponse{}},
		{e, &etcdserverpb.RangeResponse{}},
	} {
		b, err := proto.Marshal(c.msg)
		if err != nil {
			t.Fatal(err)
		}
		if got := headerRevision(b); got != 5 {
			t.Fatalf("%T: headerRevision %d, want 5", c.msg, got)
		}
		nb := withHeaderRevision(b, 12)
		if got := headerRevision(nb); got != 12 {
			t.Fatalf("%T: after withHeaderRevision(12): %d", c.msg, got)
		}
		if err := proto.Unmarshal(nb, c.out); err != nil {
			t.Fatal(err)
		}
		want := proto.Clone(c.msg)
		switch w := want.(type) {
		case *dkvpb.RangeResponse:
			w.Header.Revision = 12
		case *etcdserverpb.RangeResponse:
			w.Header.Revision = 12
		}
		if !proto.Equal(c.out, want) {
			t.Errorf("%T rewritten: %v, want %v", c.msg, c.out, want)
		}
	}
	if headerRevision([]byte{0xff}) != 0 || withHeaderRevision([]byte{0xff}, 1) != nil {
		t.Error("a malformed response is not refused")
	}
}
