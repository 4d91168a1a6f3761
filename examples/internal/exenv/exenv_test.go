package exenv

import (
	"context"
	"os"
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

// TestEventLineRoundTrip: what an instance prints, ParseEvent reads
// back: name, pid, what, and every field, including quoted ones; a line
// that is not an event is not taken for one.
func TestEventLineRoundTrip(t *testing.T) {
	at := time.Date(2026, 1, 2, 15, 4, 5, 123e6, time.UTC)
	line := FormatEvent(at, "w-1", 4242, "refused", "period", 3, "err", `locked: "k" (token 4) is not current`, "empty", "")
	if want := `15:04:05.123 w-1[4242] refused period=3 err="locked: \"k\" (token 4) is not current" empty=""`; line != want {
		t.Fatalf("line %s\nwant %s", line, want)
	}
	e, ok := ParseEvent(line + "\n")
	if !ok {
		t.Fatalf("ParseEvent(%q) failed", line)
	}
	if e.Instance != "w-1" || e.PID != 4242 || e.What != "refused" || e.Int("period") != 3 ||
		e.Get("err") != `locked: "k" (token 4) is not current` || e.Get("empty") != "" || len(e.Fields) != 3 || e.Line != line {
		t.Fatalf("parsed %+v", e)
	}
	if e, ok := ParseEvent(FormatEvent(at, "w1", 7, "stopped")); !ok || e.What != "stopped" || len(e.Fields) != 0 {
		t.Fatalf("an event without fields: %+v, %v", e, ok)
	}
	for _, l := range []string{"", "panic: boom", "goroutine 1 [running]:", "15:04:05.123 w1 started", "15:04:05.123 w1[x] started", "15:04:05.123 w1[1] started a b=c"} {
		if e, ok := ParseEvent(l); ok {
			t.Errorf("ParseEvent(%q) = %+v, want not an event", l, e)
		}
	}
}

// TestAfterwardsNamesOnlyWhatOutlivesTheRun: a program never prints a
// dkv command that cannot work once it has exited. A temporary embedded
// store is gone: no command, but how to keep it. A kept one is served
// first. A cluster gets the connection flags, without a password.
func TestAfterwardsNamesOnlyWhatOutlivesTheRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tmp, err := OpenEmbedded(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	got := tmp.Afterwards("read them", "get", "p/", "--prefix")
	tmp.Close()
	if strings.Contains(got, "dkv get") || !strings.Contains(got, "deleted") || !strings.Contains(got, "--keep") {
		t.Errorf("temporary store: %q", got)
	}
	dir := t.TempDir()
	kept, err := (&Flags{Keep: dir}).Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got = kept.Afterwards("read them", "get", "p/", "--prefix")
	if err := kept.Close(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "dkv serve --data-dir "+dir) || !strings.Contains(got, "dkv get p/ --prefix") {
		t.Errorf("kept store: %q", got)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("--keep %s: the directory is gone after Close: %v", dir, err)
	}
	cl := &Env{cli: &later{flags: []string{"--endpoints", "a:1,b:2", "--user", "ann"}}}
	if got := cl.Afterwards("read them", "get", "p/", "--prefix"); got != "To read them: dkv --endpoints a:1,b:2 --user ann get p/ --prefix" {
		t.Errorf("cluster: %q", got)
	}
	if got := kept.Command("get", "p/"); got != "" {
		t.Errorf("a command during the run against an embedded store, which has no port: %q", got)
	}
}
