package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/server/servertest"
)

// TestStorePermissions: a permission is granted in one store. A user
// with every key of store a gets PermissionDenied in store b and in the
// default store; a user with every key of the default store gets
// PermissionDenied in store a.
func TestStorePermissions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := servertest.Start(t, servertest.WithClientPort()).Srv
	as := func(user, pw, store string) *client.Client {
		c, err := client.New(ctx, client.Config{Endpoints: []string{srv.ClientAddr()}, AutoSyncInterval: -1, Username: user, Password: pw, Store: store})
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
	setup := as("", "", "")
	for _, s := range []string{"a", "b"} {
		_, err := setup.CreateStore(ctx, s, 0, 0)
		must("create "+s, err)
	}
	must("user root", setup.UserAdd(ctx, "root", "pw"))
	must("root role", setup.UserGrantRole(ctx, "root", "root"))
	must("role in-a", setup.RoleAdd(ctx, "in-a"))
	must("grant in-a", setup.WithStore("a").RoleGrantPermission(ctx, "in-a", dkvpb.Permission_READWRITE, "", "\x00", false))
	must("role in-default", setup.RoleAdd(ctx, "in-default"))
	must("grant in-default", setup.RoleGrantPermission(ctx, "in-default", dkvpb.Permission_READWRITE, "", "\x00", false))
	must("user alice", setup.UserAdd(ctx, "alice", "pw"))
	must("alice in-a", setup.UserGrantRole(ctx, "alice", "in-a"))
	must("user dan", setup.UserAdd(ctx, "dan", "pw"))
	must("dan in-default", setup.UserGrantRole(ctx, "dan", "in-default"))
	must("auth enable", setup.AuthEnable(ctx))

	alice, dan := as("alice", "pw", "a"), as("dan", "pw", "")
	_, err := alice.Put(ctx, "k", []byte("v"))
	must("alice puts in a", err)
	_, err = alice.List(ctx, "")
	must("alice lists a", err)
	_, err = dan.Put(ctx, "k", []byte("v"))
	must("dan puts in the default store", err)
	_, err = alice.Query(ctx, "prefix= x=y", client.WithQueryScan())
	must("alice queries a", err)
	_, err = dan.Query(ctx, "prefix= x=y", client.WithQueryScan())
	must("dan queries the default store", err)
	for _, c := range []struct {
		what string
		err  error
	}{
		{"alice puts in b", func() error { _, err := alice.WithStore("b").Put(ctx, "k", []byte("v")); return err }()},
		{"alice reads b", func() error { _, err := alice.WithStore("b").Get(ctx, "k"); return err }()},
		{"alice puts in the default store", func() error { _, err := alice.WithStore("").Put(ctx, "k", []byte("v")); return err }()},
		{"dan puts in a", func() error { _, err := dan.WithStore("a").Put(ctx, "k", []byte("v")); return err }()},
		{"dan lists a", func() error { _, err := dan.WithStore("a").List(ctx, ""); return err }()},
		{"dan watches a", func() error { _, err := dan.WithStore("a").WatchPrefix(ctx, ""); return err }()},
		{"dan queries a", func() error {
			_, err := dan.WithStore("a").Query(ctx, "prefix= x=y", client.WithQueryScan())
			return err
		}()},
		{"alice queries b", func() error {
			_, err := alice.WithStore("b").Query(ctx, "prefix= x=y", client.WithQueryScan())
			return err
		}()},
		{"alice queries the default store", func() error {
			_, err := alice.WithStore("").Query(ctx, "prefix= x=y", client.WithQueryScan())
			return err
		}()},
	} {
		if !errors.Is(c.err, client.ErrPermissionDenied) {
			t.Errorf("%s: %v, want PermissionDenied", c.what, c.err)
		}
	}
}
