package zktest

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// Proxy forwards TCP connections to a ZooKeeper server and can cut them, so
// a test can make a client lose its connection (and, held long enough, its
// session) while the server and every other client carry on. It can also
// hold what it forwards for a while in each direction, as a slow network
// would (see SetDelay), or stand for a server that has hung (see Hang).
type Proxy struct {
	Addr     string
	upstream string
	ln       net.Listener
	mu       sync.Mutex
	blocked  bool
	conns    map[net.Conn]bool
	toServer Delay
	toClient Delay
	// hung is closed by Resume; nil while the proxy forwards. held are the
	// connections taken meanwhile, to forward on Resume.
	hung   chan struct{}
	held   []net.Conn
	closed chan struct{}
	done   chan struct{}
}

// Delay is how long one direction of a proxy holds what it forwards: each
// piece read waits a time drawn between Min and Max (Max below Min counts
// as Min) before it is written on. Pieces leave in the order they came, as
// on one TCP connection, so a shorter draw never overtakes a longer one.
type Delay struct {
	Min, Max time.Duration
}

// draw picks one piece's delay.
func (d Delay) draw() time.Duration {
	if d.Max <= d.Min {
		return d.Min
	}
	return d.Min + rand.N(d.Max-d.Min+1)
}

// NewProxy listens on a free loopback port and forwards to upstream.
func NewProxy(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("zktest: proxy: %w", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), upstream: upstream, ln: ln, conns: map[net.Conn]bool{},
		closed: make(chan struct{}), done: make(chan struct{})}
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
		switch {
		case p.blocked:
			c.Close()
		case p.hung != nil:
			// Taken, as a hung server's kernel takes it, and left unread.
			p.conns[c] = true
			p.held = append(p.held, c)
		default:
			p.forwardLocked(c)
		}
		p.mu.Unlock()
	}
}

// forwardLocked connects c to the server and forwards both ways.
func (p *Proxy) forwardLocked(c net.Conn) {
	up, err := net.Dial("tcp", p.upstream)
	if err != nil {
		delete(p.conns, c)
		c.Close()
		return
	}
	p.conns[c], p.conns[up] = true, true
	go p.pipe(c, up, false)
	go p.pipe(up, c, true)
}

// Hang makes the proxy stand for a server that has hung (a long GC pause,
// a frozen process or VM): it takes new connections and answers nothing,
// and forwards nothing more on those it has, until Resume.
func (p *Proxy) Hang() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hung == nil {
		p.hung = make(chan struct{})
	}
}

// Resume ends a hang: what was held goes on, and the connections taken
// meanwhile are forwarded.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hung == nil {
		return
	}
	close(p.hung)
	p.hung = nil
	for _, c := range p.held {
		if p.conns[c] { // not cut meanwhile
			p.forwardLocked(c)
		}
	}
	p.held = nil
}

// whileHung waits while the proxy is hung (false: it was closed).
func (p *Proxy) whileHung() bool {
	p.mu.Lock()
	hung := p.hung
	p.mu.Unlock()
	if hung == nil {
		return true
	}
	select {
	case <-hung:
		return true
	case <-p.closed:
		return false
	}
}

// SetDelay makes the proxy hold what it forwards: toServer for what clients
// send, toClient for the server's answers. It applies to connections open
// now and to later ones; the zero Delay forwards at once.
func (p *Proxy) SetDelay(toServer, toClient Delay) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.toServer, p.toClient = toServer, toClient
}

func (p *Proxy) delay(toServer bool) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if toServer {
		return p.toServer.draw()
	}
	return p.toClient.draw()
}

// chunk is a piece read from one side, due on the other at a given time.
type chunk struct {
	data []byte
	due  time.Time
}

// pipe forwards src to dst: a reader stamps each piece with the time it is
// due, a writer sends it then, so a delay holds every piece the same while
// the connection keeps streaming.
func (p *Proxy) pipe(dst, src net.Conn, toServer bool) {
	chunks := make(chan chunk, 256)
	stopped := make(chan struct{})
	go func() {
		defer close(chunks)
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				select {
				case chunks <- chunk{data: bytes.Clone(buf[:n]), due: time.Now().Add(p.delay(toServer))}:
				case <-stopped:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range chunks {
		if wait := time.Until(c.due); wait > 0 {
			time.Sleep(wait) // at most Delay.Max: a cut connection fails the write after it
		}
		if !p.whileHung() {
			break
		}
		if _, err := dst.Write(c.data); err != nil {
			break
		}
	}
	close(stopped)
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
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.closed:
	default:
		close(p.closed)
	}
}
