package cli_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/internal/cli/clitest"
)

// A prefix whose values add up to more than a gRPC reply may carry (the
// client accepts 64 MiB) is printed in full: dkv get --prefix pages.
func TestGetPrefixLargerThanOneReply(t *testing.T) {
	n := clitest.StartServe(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.New(ctx, client.Config{Endpoints: []string{n.Addr}, AutoSyncInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const keys = 66 // x (1 MiB - 64) > 64 MiB
	val := func(i int) []byte { return bytes.Repeat([]byte{'a' + byte(i%26)}, 1<<20-64) }
	var wg sync.WaitGroup
	errs := make(chan error, keys)
	sem := make(chan struct{}, 4)
	for i := 0; i < keys; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if _, err := c.Put(ctx, fmt.Sprintf("big/%03d", i), val(i)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	n.OK("", "put", "bigger", "not in the prefix")

	cmd := exec.Command(clitest.Bin, "--timeout", "60s", "get", "big/", "--prefix")
	cmd.Env = append(os.Environ(), "DKV_ENDPOINTS="+n.Addr)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("dkv get big/ --prefix: %v: %s", err, errb.String())
	}
	var want bytes.Buffer
	for i := 0; i < keys; i++ {
		fmt.Fprintf(&want, "big/%03d\n%s\n", i, val(i))
	}
	if !bytes.Equal(out.Bytes(), want.Bytes()) {
		t.Fatalf("get --prefix printed %d bytes (%d lines), want %d bytes", out.Len(), bytes.Count(out.Bytes(), []byte("\n")), want.Len())
	}

	// -o json: one object, every key, the first page's count and revision.
	var js struct {
		Count int64
		More  bool
		KVs   []map[string]any
	}
	r := n.DKV("", "-o", "json", "get", "big/", "--prefix", "--keys-only")
	if err := json.Unmarshal([]byte(r.Stdout), &js); err != nil || js.Count != keys || len(js.KVs) != keys || js.More {
		t.Fatalf("get --prefix -o json: count %d, %d kvs, more %v, err %v (%q)", js.Count, len(js.KVs), js.More, err, r.Stderr)
	}
	// --limit still cuts it short, and says so.
	r = n.DKV("", "-o", "json", "get", "big/", "--prefix", "--keys-only", "--limit", "5")
	if err := json.Unmarshal([]byte(r.Stdout), &js); err != nil || len(js.KVs) != 5 || !js.More {
		t.Fatalf("get --prefix --limit 5 -o json: %d kvs, more %v, err %v", len(js.KVs), js.More, err)
	}
}

// -o json carries a key that is not UTF-8 as key_base64, byte for byte,
// as it does for values.
func TestJSONBinaryKeys(t *testing.T) {
	n := clitest.StartServe(t, t.TempDir())
	key := "bin/\xff\xfe\x01"
	n.OK("", "put", key, "v")
	for _, args := range [][]string{
		{"get", key},
		{"get", "bin/", "--prefix"},
	} {
		out := n.OK("", append([]string{"-o", "json"}, args...)...)
		var js struct {
			KVs []struct {
				Key       *string `json:"key"`
				KeyBase64 string  `json:"key_base64"`
			} `json:"kvs"`
		}
		if err := json.Unmarshal([]byte(out), &js); err != nil || len(js.KVs) != 1 {
			t.Fatalf("%v: %q (%v)", args, out, err)
		}
		got, err := base64.StdEncoding.DecodeString(js.KVs[0].KeyBase64)
		if err != nil || string(got) != key || js.KVs[0].Key != nil {
			t.Errorf("dkv %v -o json: key %v, key_base64 %q; want only key_base64 %q", args, js.KVs[0].Key, js.KVs[0].KeyBase64, base64.StdEncoding.EncodeToString([]byte(key)))
		}
	}
	// dkv watch -o json too, for the event's key and its kv.
	_, lines := startWatch(t, n, "bin/", "--prefix", "--snapshot", "-o", "json")
	select {
	case l := <-lines:
		var ev struct {
			Key       *string `json:"key"`
			KeyBase64 string  `json:"key_base64"`
			KV        struct {
				KeyBase64 string `json:"key_base64"`
			} `json:"kv"`
		}
		want := base64.StdEncoding.EncodeToString([]byte(key))
		if err := json.Unmarshal([]byte(l), &ev); err != nil || ev.Key != nil || ev.KeyBase64 != want || ev.KV.KeyBase64 != want {
			t.Errorf("watch -o json printed %q (%v); want key_base64 %q", l, err, want)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("watch printed nothing")
	}
	// A UTF-8 key stays a plain "key".
	n.OK("", "put", "plain/ключ", "v")
	if out := n.OK("", "-o", "json", "get", "plain/ключ"); !strings.Contains(out, `"key":"plain/ключ"`) || strings.Contains(out, "key_base64") {
		t.Errorf("UTF-8 key printed as %q", out)
	}
}
