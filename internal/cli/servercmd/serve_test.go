package servercmd

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// exitUsage is the usage-error exit code docs/cli.md promises.
const exitUsage = 2

func TestServeLeaseMaxClockDrift(t *testing.T) {
	for flag, want := range map[float64]float64{0: -1, 0.01: 0.01, 0.2: 0.2} {
		if got, err := leaseMaxClockDrift(flag); err != nil || got != want {
			t.Errorf("--lease-max-clock-drift %v: config %v (%v), want %v", flag, got, err, want)
		}
	}
	for _, arg := range []string{"0.5", "-0.01", "NaN"} {
		var stdout, stderr bytes.Buffer
		code := Server.Run([]string{"serve", "--data-dir", t.TempDir(), "--lease-max-clock-drift", arg}, nil, &stdout, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), "out of range [0, 0.5)") {
			t.Errorf("--lease-max-clock-drift %s: exit %d, stderr %q; want a usage error naming the range", arg, code, stderr.String())
		}
	}
}

func TestServeLeaseRenewWindow(t *testing.T) {
	for flag, want := range map[time.Duration]time.Duration{0: -1, time.Second: time.Second, time.Minute: time.Minute} {
		if got, err := leaseRenewWindow(flag); err != nil || got != want {
			t.Errorf("--lease-renew-window %v: config %v (%v), want %v", flag, got, err, want)
		}
	}
	for _, arg := range []string{"-1s", "61s"} {
		var stdout, stderr bytes.Buffer
		code := Server.Run([]string{"serve", "--data-dir", t.TempDir(), "--lease-renew-window", arg}, nil, &stdout, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), "out of range [0, 1m0s]") {
			t.Errorf("--lease-renew-window %s: exit %d, stderr %q; want a usage error naming the range", arg, code, stderr.String())
		}
	}
}

// A TLS flag that is missing its partner, or a bad --tls-min-version, is
// a usage error naming the flag; a certificate file that cannot be read
// fails the start naming its flag. The client's --cert/--key/--cacert
// likewise.
func TestServeTLSFlagErrors(t *testing.T) {
	ports := []string{"--client-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--peer-addr", "127.0.0.1:0"}
	missing := t.TempDir() + "/missing.pem"
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--cert-file", missing}, exitUsage, "--key-file is required with --cert-file"},
		{[]string{"--key-file", missing}, exitUsage, "--cert-file is required with --key-file"},
		{[]string{"--cert-file", missing, "--key-file", missing, "--client-cert-auth"}, exitUsage, "--client-cert-auth needs --trusted-ca-file"},
		{[]string{"--peer-cert-file", missing, "--peer-key-file", missing}, exitUsage, "--peer-trusted-ca-file is required with --peer-cert-file"},
		{[]string{"--peer-cert-file", missing}, exitUsage, "--peer-key-file is required with --peer-cert-file"},
		{[]string{"--tls-min-version", "1.0"}, exitUsage, `--tls-min-version: "1.0" is not an accepted TLS version: use 1.2 or 1.3`},
		{[]string{"--tls-min-version", "tls9"}, exitUsage, "--tls-min-version"},
		{[]string{"--cert-file", missing, "--key-file", missing}, 1, "--cert-file/--key-file: "},
	} {
		var stdout, stderr bytes.Buffer
		args := append(append([]string{"serve", "--data-dir", t.TempDir()}, ports...), c.args...)
		code := Server.Run(args, nil, &stdout, &stderr)
		if code != c.code || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("serve %q: exit %d, stderr %q; want exit %d naming %q", c.args, code, stderr.String(), c.code, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--cert", missing}, "--key is required with --cert"},
		{[]string{"--key", missing}, "--cert is required with --key"},
		{[]string{"--cacert", missing}, "--cacert: "},
		{[]string{"--cert", missing, "--key", missing}, "--cert/--key: "},
	} {
		var stdout, stderr bytes.Buffer
		code := Server.Run(append(c.args, "get", "k"), nil, &stdout, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("dkv %q get k: exit %d, stderr %q; want a usage error naming %q", c.args, code, stderr.String(), c.want)
		}
	}
}

// A block cache under the minimum is refused before anything starts,
// with a message naming the limit.
func TestServeCacheBytesTooSmall(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := Server.Run([]string{"serve", "--data-dir", t.TempDir(), "--client-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--peer-addr", "127.0.0.1:0",
		"--cache-bytes", "4096"}, nil, &stdout, &stderr)
	if code != exitUsage || !strings.Contains(stderr.String(), "cache bytes 4096 is below the 1 MiB minimum") {
		t.Fatalf("serve --cache-bytes 4096: exit %d, stderr %q; want a usage error naming the 1 MiB minimum", code, stderr.String())
	}
}

// A malformed --cors-allowed-origins or --http-allowed-hosts is a usage
// error naming the flag and what is wrong with the value.
func TestServeHTTPGuardFlagErrors(t *testing.T) {
	ports := []string{"--client-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--peer-addr", "127.0.0.1:0"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--cors-allowed-origins", "https://ok.example,app.example"}, `--cors-allowed-origins: "app.example" is not an origin: it needs the scheme http:// or https://`},
		{[]string{"--cors-allowed-origins", "https://app.example/ui/"}, `--cors-allowed-origins: "https://app.example/ui/" is not an origin: write scheme://host[:port]`},
		{[]string{"--http-allowed-hosts", "http://dkv.example.com"}, `--http-allowed-hosts: "http://dkv.example.com" is not a host name`},
	} {
		var stdout, stderr bytes.Buffer
		args := append(append([]string{"serve", "--data-dir", t.TempDir()}, ports...), c.args...)
		code := Server.Run(args, nil, &stdout, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("serve %q: exit %d, stderr %q; want a usage error naming %q", c.args, code, stderr.String(), c.want)
		}
	}
}

// A raft log segment size outside its range is a usage error naming the
// flag and the range, before anything is written to the data dir.
func TestServeRaftLogSegmentBytesRange(t *testing.T) {
	for _, arg := range []string{"1KiB", "2GiB"} {
		var stdout, stderr bytes.Buffer
		code := Server.Run([]string{"serve", "--data-dir", t.TempDir(), "--raft-log-segment-bytes", arg}, nil, &stdout, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), "--raft-log-segment-bytes") || !strings.Contains(stderr.String(), "[64 KiB, 1 GiB]") {
			t.Errorf("--raft-log-segment-bytes %s: exit %d, stderr %q; want a usage error naming the flag and its range", arg, code, stderr.String())
		}
	}
}
