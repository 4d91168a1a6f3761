package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/server/servertest"
)

// TestRateLimitPermission: with auth on, a rate limiter's key needs
// permission like any key (read and write: a decision changes the bucket
// and its answer tells the bucket's state). Alice, with readwrite on
// app/, uses app/rl and not other/rl; bob, with read only on app/, is
// refused app/rl naming write.
func TestRateLimitPermission(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := servertest.Start(t, servertest.WithClientPort()).Srv
	as := func(user, pw string) *client.Client {
		c, err := client.New(ctx, client.Config{Endpoints: []string{srv.ClientAddr()}, AutoSyncInterval: -1, Username: user, Password: pw})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	setup := as("", "")
	must("user root", setup.UserAdd(ctx, "root", "pw"))
	must("root role", setup.UserGrantRole(ctx, "root", "root"))
	must("role app-rw", setup.RoleAdd(ctx, "app-rw"))
	must("grant app-rw", setup.RoleGrantPermission(ctx, "app-rw", dkvpb.Permission_READWRITE, "app/", "", true))
	must("role app-r", setup.RoleAdd(ctx, "app-r"))
	must("grant app-r", setup.RoleGrantPermission(ctx, "app-r", dkvpb.Permission_READ, "app/", "", true))
	must("user alice", setup.UserAdd(ctx, "alice", "pw"))
	must("alice app-rw", setup.UserGrantRole(ctx, "alice", "app-rw"))
	must("user bob", setup.UserAdd(ctx, "bob", "pw"))
	must("bob app-r", setup.UserGrantRole(ctx, "bob", "app-r"))
	must("auth enable", setup.AuthEnable(ctx))

	l := client.RateLimit{Limit: 10, Period: time.Second, Burst: 10}
	alice, bob := as("alice", "pw"), as("bob", "pw")
	d, err := alice.RateLimitAllow(ctx, "app/rl", l, 1)
	if err != nil || !d.Allowed {
		t.Fatalf("alice on app/rl: %+v %v; want allowed", d, err)
	}
	if _, err := alice.RateLimitReserve(ctx, "app/rl", l, 1, time.Second); err != nil {
		t.Fatalf("alice reserves on app/rl: %v", err)
	}
	for _, c := range []struct {
		who  string
		c    *client.Client
		key  string
		want string
	}{
		{"alice", alice, "other/rl", `user "alice" lacks`},
		{"bob", bob, "app/rl", "write"},
	} {
		_, err := c.c.RateLimitAllow(ctx, c.key, l, 1)
		if !errors.Is(err, client.ErrPermissionDenied) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.key) {
			t.Errorf("%s on %s: %v; want PermissionDenied naming %q and the key", c.who, c.key, err, c.want)
		}
	}
	if _, err := as("root", "pw").RateLimitAllow(ctx, "other/rl", l, 1); err != nil {
		t.Errorf("root on other/rl: %v", err)
	}
}
