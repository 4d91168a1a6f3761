package exenv

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestCertNeedsKey: --cert without --key, or --key without --cert, is
// refused with an error that names both flags, before anything is dialled.
func TestCertNeedsKey(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, f := range []Flags{
		{Endpoints: "127.0.0.1:1", Cert: "client.crt"},
		{Endpoints: "127.0.0.1:1", Key: "client.key"},
	} {
		env, err := f.Open(ctx)
		if err == nil {
			env.Close()
			t.Errorf("Open(%+v) succeeded, want an error", f)
			continue
		}
		if !strings.Contains(err.Error(), "--cert and --key go together") {
			t.Errorf("Open(%+v): %v, want \"--cert and --key go together\"", f, err)
		}
	}
}
