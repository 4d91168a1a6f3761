package main

import (
	"os"
	"testing"
	"time"
)

func TestParseProcStatCPU(t *testing.T) {
	// The tail after comm is a real line's shape: state, ppid, ... utime
	// (field 14) = 250, stime (field 15) = 130 ticks.
	const tail = " S 1 1234 1234 0 -1 4194560 9876 0 12 0 250 130 0 0 20 0 9 0 4242 123456789 2048 18446744073709551615 1 1 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	want := 3800 * time.Millisecond
	for _, comm := range []string{
		"(etcd)",
		"(dkv serve)",         // a space
		"(my (odd) prog)",     // parentheses
		"(a) 1 2 3 4 5 6 7 )", // a ')' followed by numbers, inside comm
		"()",
	} {
		got, err := parseProcStatCPU([]byte("4321 " + comm + tail))
		if err != nil {
			t.Errorf("comm %s: %v", comm, err)
			continue
		}
		if got != want {
			t.Errorf("comm %s: cpu %v, want %v", comm, got, want)
		}
	}
	for _, bad := range []string{
		"",
		"4321 etcd S 1 2 3",         // no parentheses
		"4321 (etcd) S 1 2 3 4 5 6", // too few fields
		"4321 (etcd) S 1 1234 1234 0 -1 4194560 9876 0 12 0 x 130 0 0",
	} {
		if got, err := parseProcStatCPU([]byte(bad)); err == nil {
			t.Errorf("%q: parsed as %v, want an error", bad, got)
		}
	}
}

func TestParseStatusRSS(t *testing.T) {
	status := "Name:\tetcd\nVmPeak:\t  900000 kB\nVmRSS:\t   51200 kB\nThreads:\t12\n"
	got, err := parseStatusRSS([]byte(status))
	if err != nil || got != 51200*1024 {
		t.Fatalf("parseStatusRSS = %d, %v; want %d", got, err, 51200*1024)
	}
	if _, err := parseStatusRSS([]byte("Name:\tx\n")); err == nil {
		t.Error("no VmRSS line: want an error")
	}
}

// TestProcSelf reads this test process's own files, so the parsing holds
// against the running kernel's format, not only the samples above.
func TestProcSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	// Burn CPU until the kernel has counted a tick of it: no clock, so
	// no timing assumption.
	var cpu time.Duration
	for n := 0; cpu == 0; n++ {
		var err error
		if cpu, err = procCPU(os.Getpid()); err != nil {
			t.Fatal(err)
		}
		_ = n * n
	}
	rss, err := procRSS(os.Getpid())
	if err != nil || rss <= 0 {
		t.Errorf("procRSS(self) = %d, %v; want > 0", rss, err)
	}
}
