package cli

import (
	"context"
	"fmt"
	"net"
	"sync"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// benchDial is how dkv bench dials a member: with TLS when --cacert is
// set, and, with --user, with a token fetched once by Authenticate and
// sent on every call, so the benchmark measures what an authenticated
// client costs without an Authenticate per operation.
func (a *App) benchDial(user, password string) func(context.Context, string) (*grpc.ClientConn, error) {
	var mu sync.Mutex
	token := ""
	// Called from several goroutines at once (dkv bench --route leader
	// asks every endpoint at the same time): everything but the token is
	// local to the call.
	return func(ctx context.Context, ep string) (*grpc.ClientConn, error) {
		creds := grpc.WithTransportCredentials(insecure.NewCredentials())
		if a.tls.cfg != nil {
			cfg := a.tls.cfg.Clone()
			if host, _, err := net.SplitHostPort(ep); err == nil && cfg.ServerName == "" {
				cfg.ServerName = host
			}
			creds = grpc.WithTransportCredentials(credentials.NewTLS(cfg))
		}
		target := "passthrough:///" + ep
		if user == "" {
			return grpc.NewClient(target, creds)
		}
		mu.Lock()
		defer mu.Unlock()
		if token == "" {
			conn, err := grpc.NewClient(target, creds)
			if err != nil {
				return nil, err
			}
			resp, err := dkvpb.NewAuthClient(conn).Authenticate(ctx, &dkvpb.AuthenticateRequest{Name: user, Password: password})
			conn.Close()
			if err != nil {
				return nil, fmt.Errorf("authenticating as %q: %w", user, err)
			}
			token = resp.GetToken()
		}
		return grpc.NewClient(target, creds, grpc.WithPerRPCCredentials(tokenCreds(token)))
	}
}

// tokenCreds sends a fixed token as gRPC metadata "token".
type tokenCreds string

func (t tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"token": string(t)}, nil
}

// RequireTransportSecurity is false so a plaintext dev cluster works too
// (the token is then as exposed as everything else on that connection).
func (tokenCreds) RequireTransportSecurity() bool { return false }
