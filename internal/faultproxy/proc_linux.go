//go:build linux

package faultproxy

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// ProcessIdentifier returns an Identify function that names a loopback
// connection's sender by the process that owns its source socket: pids
// maps process ids to sender names. It reads /proc/net/tcp{,6} and
// /proc/<pid>/fd, so it needs the processes to belong to this user.
type ProcessIdentifier struct {
	mu   sync.Mutex
	pids map[int]string
}

// Set names pid's connections sender (call again after a restart).
func (pi *ProcessIdentifier) Set(pid int, sender string) {
	pi.mu.Lock()
	defer pi.mu.Unlock()
	if pi.pids == nil {
		pi.pids = map[int]string{}
	}
	for p, s := range pi.pids {
		if s == sender {
			delete(pi.pids, p)
		}
	}
	pi.pids[pid] = sender
}

// Identify implements Proxy.Identify.
func (pi *ProcessIdentifier) Identify(c net.Conn) string {
	ra, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return ""
	}
	inode := socketInode(ra.Port)
	if inode == "" {
		return ""
	}
	want := "socket:[" + inode + "]"
	pi.mu.Lock()
	defer pi.mu.Unlock()
	for pid, name := range pi.pids {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			if l, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), fd.Name())); err == nil && l == want {
				return name
			}
		}
	}
	return ""
}

// socketInode finds the inode of the socket whose local port is port (the
// client end of the accepted connection).
func socketInode(port int) string {
	hexPort := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Scan() // header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 {
				continue
			}
			// fields[1] is the local address; state 01 is ESTABLISHED.
			if strings.HasSuffix(fields[1], hexPort) && fields[3] == "01" {
				if _, err := strconv.Atoi(fields[9]); err == nil && fields[9] != "0" {
					fh.Close()
					return fields[9]
				}
			}
		}
		fh.Close()
	}
	return ""
}
