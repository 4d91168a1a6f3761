package bench

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dkv-io/dkv/internal/dkverr"
)

// ClassifyDKV names an error by its DKV status code; transport errors that
// carry no DKV status are named by their gRPC code ("grpc:Unavailable").
func ClassifyDKV(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "DeadlineExceeded"
	}
	if errors.Is(err, context.Canceled) {
		return "Canceled"
	}
	c := dkverr.CodeOf(err)
	if c != dkverr.Internal {
		return c.String()
	}
	var de *dkverr.Error
	if errors.As(dkverr.FromGRPC(err), &de) {
		return c.String()
	}
	st, ok := status.FromError(err)
	if ok && (st.Code() == codes.DeadlineExceeded || st.Code() == codes.Canceled) {
		return st.Code().String()
	}
	if ok && st.Code() != codes.Unknown {
		return "grpc:" + st.Code().String()
	}
	return c.String()
}
