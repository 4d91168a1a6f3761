package faultproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// AllSenders, as a sender, makes a fault apply to every connection.
const AllSenders = "*"

// Proxy forwards TCP connections from Addr to Target.
type Proxy struct {
	identify func(c net.Conn) string

	ln     net.Listener
	target string

	mu      sync.Mutex
	cut     map[string]bool // sender -> blackholed
	delay   map[string]time.Duration
	conns   map[*link]bool
	changed chan struct{} // closed and replaced on every fault change
	closed  bool
	wg      sync.WaitGroup
}

type link struct {
	sender    string
	down, up  net.Conn // down: the accepted conn; up: to the target
	closeOnce sync.Once
	closed    chan struct{}
}

// Listen starts a proxy on addr ("127.0.0.1:0" for any port) forwarding
// to target. identify, if not nil, names the sender of each accepted
// connection ("" when unknown), for per-sender faults.
func Listen(addr, target string, identify func(net.Conn) string) (*Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, identify: identify, cut: map[string]bool{}, delay: map[string]time.Duration{},
		conns: map[*link]bool{}, changed: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listen address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is where the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Cut blackholes traffic from sender (AllSenders: everyone) in both
// directions: bytes are held back, connections stay open and stall, new
// connections are accepted and stall too, as with a network partition.
func (p *Proxy) Cut(sender string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut[sender] = true
	p.notifyLocked()
}

// Delay holds every chunk from sender back by d before forwarding it.
func (p *Proxy) Delay(sender string, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay[sender] = d
	p.notifyLocked()
}

// Reset closes every open connection from sender (AllSenders: all), as a
// crashed middlebox or a TCP RST would.
func (p *Proxy) Reset(sender string) {
	p.mu.Lock()
	var ls []*link
	for l := range p.conns {
		if sender == AllSenders || l.sender == sender {
			ls = append(ls, l)
		}
	}
	p.mu.Unlock()
	for _, l := range ls {
		l.close()
	}
}

// Heal removes every fault. Stalled connections resume where they were.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = map[string]bool{}
	p.delay = map[string]time.Duration{}
	p.notifyLocked()
}

func (p *Proxy) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// state reports whether sender's traffic is cut, its delay, and a
// channel closed at the next change.
func (p *Proxy) state(sender string) (bool, time.Duration, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := p.delay[sender]
	if d == 0 {
		d = p.delay[AllSenders]
	}
	return p.cut[AllSenders] || (sender != "" && p.cut[sender]), d, p.changed
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Reset(AllSenders)
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(down net.Conn) {
	defer p.wg.Done()
	sender := ""
	if p.identify != nil {
		sender = p.identify(down)
	}
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		down.Close()
		return
	}
	l := &link{sender: sender, down: down, up: up, closed: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		down.Close()
		up.Close()
		return
	}
	p.conns[l] = true
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { p.pipe(l, up, down); done <- struct{}{} }()
	go func() { p.pipe(l, down, up); done <- struct{}{} }()
	<-done
	l.close()
	<-done
	p.mu.Lock()
	delete(p.conns, l)
	p.mu.Unlock()
}

func (l *link) close() {
	l.closeOnce.Do(func() {
		close(l.closed)
		l.down.Close()
		l.up.Close()
	})
}

// pipe copies src to dst chunk by chunk, honouring the sender's faults
// before forwarding each chunk.
func (p *Proxy) pipe(l *link, dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.gate(l) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			// Half-close: pass the EOF on.
			if tc, ok := dst.(*net.TCPConn); ok {
				tc.CloseWrite()
			}
			return
		}
	}
}

// gate blocks while the link is cut and sleeps its delay; false if the
// link was closed meanwhile.
func (p *Proxy) gate(l *link) bool {
	for {
		cut, delay, changed := p.state(l.sender)
		if !cut {
			if delay > 0 {
				time.Sleep(delay)
			}
			return true
		}
		select {
		case <-changed:
		case <-l.closed:
			return false
		}
	}
}
