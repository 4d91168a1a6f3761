package faultproxy

import (
	"bufio"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// echoServer echoes lines back.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, msg string, timeout time.Duration) (string, error) {
	t.Helper()
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	return r.ReadString('\n')
}

func TestProxyForwardsCutsAndHeals(t *testing.T) {
	p, err := Listen("127.0.0.1:0", echoServer(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := roundTrip(t, c, r, "one", 5*time.Second); err != nil || got != "one\n" {
		t.Fatalf("healthy proxy: %q %v", got, err)
	}
	p.Cut(AllSenders)
	if got, err := roundTrip(t, c, r, "two", 300*time.Millisecond); err == nil {
		t.Fatalf("cut proxy delivered %q", got)
	}
	p.Heal()
	// The stalled bytes arrive after the heal, in order.
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "two\n" {
		t.Fatalf("after heal: %q %v", got, err)
	}
	p.Delay(AllSenders, 200*time.Millisecond)
	start := time.Now()
	if got, err := roundTrip(t, c, r, "three", 5*time.Second); err != nil || got != "three\n" {
		t.Fatalf("delayed: %q %v", got, err)
	}
	if time.Since(start) < 200*time.Millisecond {
		t.Fatalf("delay not applied: round trip took %v", time.Since(start))
	}
	p.Heal()
	p.Reset(AllSenders)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("reset connection still open")
	}
}

func TestProxyCutsOnlyTheIdentifiedSender(t *testing.T) {
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		t.Skip("no /proc/net/tcp: sender identification is Linux-only")
	}
	var ids ProcessIdentifier
	ids.Set(os.Getpid(), "me")
	p, err := Listen("127.0.0.1:0", echoServer(t), ids.Identify)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Cut("someone-else")
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := roundTrip(t, c, r, "a", 5*time.Second); err != nil || got != "a\n" {
		t.Fatalf("other sender's cut blocked us: %q %v", got, err)
	}
	p.Cut("me")
	if got, err := roundTrip(t, c, r, "b", 300*time.Millisecond); err == nil {
		t.Fatalf("our cut did not apply: %q", got)
	}
}
