package zktest

import (
	"fmt"
	"io"
	"net"
	"sync"
)

// Proxy forwards TCP connections to a ZooKeeper server and can cut them, so
// a test can make a client lose its connection (and, held long enough, its
// session) while the server and every other client carry on.
type Proxy struct {
	Addr     string
	upstream string
	ln       net.Listener
	mu       sync.Mutex
	blocked  bool
	conns    map[net.Conn]bool
	done     chan struct{}
}

// NewProxy listens on a free loopback port and forwards to upstream.
func NewProxy(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("zktest: proxy: %w", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), upstream: upstream, ln: ln, conns: map[net.Conn]bool{}, done: make(chan struct{})}
	go p.accept()
	return p, nil
}

func (p *Proxy) accept() {
	defer close(p.done)
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.blocked {
			p.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.upstream)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[up] = true, true
		p.mu.Unlock()
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

func (p *Proxy) pipe(dst, src net.Conn) {
	io.Copy(dst, src)
	dst.Close()
	src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// Block cuts every connection and refuses new ones until Unblock.
func (p *Proxy) Block() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blocked = true
	for c := range p.conns {
		c.Close()
	}
}

// Unblock lets connections through again.
func (p *Proxy) Unblock() {
	p.mu.Lock()
	p.blocked = false
	p.mu.Unlock()
}

// Close stops the proxy and cuts its connections.
func (p *Proxy) Close() {
	p.ln.Close()
	p.Block()
	<-p.done
}
