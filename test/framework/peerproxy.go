package framework

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

const (
	// peerHeaderLimit bounds what the proxy reads of a connection before it
	// knows who sent it: etcd's peer requests have headers of a few hundred
	// bytes, and a connection that sends more without ending its header is
	// not etcd's.
	peerHeaderLimit = 16 << 10
	// peerHeaderTimeout bounds how long the proxy waits for that header: an
	// HTTP client writes its request as soon as it has connected.
	peerHeaderTimeout = 5 * time.Second
	// peerDialTimeout bounds the dial to the member's real peer listener,
	// on loopback.
	peerDialTimeout = 5 * time.Second
)

// peerNetwork is the etcd members' peer network: one TCP proxy per member
// in front of the member's real peer listener, and the partitions between
// them. Every member advertises its proxy's address as its peer URL, so
// every connection another member opens to it goes through the proxy.
//
// The proxy knows which member a connection goes to (the one behind it)
// but not, from the TCP connection alone, which member it comes from: all
// of them dial from 127.0.0.1. etcd's rafthttp names the sender in the
// X-Server-From header (the member ID in hex) of every raft request
// (streams, pipeline, snapshots), and all requests on one connection come
// from one process, so the proxy reads the first request's header of each
// connection to learn its sender. This is why the peer traffic is plain
// HTTP on loopback: with peer TLS the proxy could not read the header.
// Requests that are not raft's (the probing of /raft/probing, /version,
// forwarded lease renewals) carry no X-Server-From; their connections have
// an unknown sender and are cut only when the member they go to is
// partitioned.
type peerNetwork struct {
	mu sync.Mutex
	// ids maps etcd member IDs to member indexes; empty until the cluster
	// has started and its member list is known. A connection remembers its
	// sender's ID, not its index, so that a connection accepted before the
	// mapping was known is still cut when its sender is partitioned later.
	ids         map[uint64]int
	partitioned map[int]bool
	conns       map[*proxiedConn]struct{}
	proxies     []*peerProxy
	closed      bool
}

func newPeerNetwork() *peerNetwork {
	return &peerNetwork{ids: map[uint64]int{}, partitioned: map[int]bool{}, conns: map[*proxiedConn]struct{}{}}
}

// peerProxy is the proxy in front of one member.
type peerProxy struct {
	net     *peerNetwork
	index   int
	ln      net.Listener
	backend string
	done    chan struct{}
}

// proxiedConn is one accepted connection and, once dialled, its
// connection to the member behind the proxy.
type proxiedConn struct {
	to int
	// fromID is the sender's member ID from X-Server-From (hasFrom false:
	// none).
	fromID  uint64
	hasFrom bool

	mu      sync.Mutex
	closed  bool
	client  net.Conn
	backend net.Conn
}

// listen starts the proxy of member index on a free loopback port; it
// forwards to backend (host:port), which need not listen yet.
func (n *peerNetwork) listen(index int) (*peerProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("peer proxy of member %d: %w", index, err)
	}
	p := &peerProxy{net: n, index: index, ln: ln, done: make(chan struct{})}
	n.mu.Lock()
	n.proxies = append(n.proxies, p)
	n.mu.Unlock()
	return p, nil
}

// serve forwards accepted connections to backend until close.
func (p *peerProxy) serve(backend string) {
	p.backend = backend
	go func() {
		defer close(p.done)
		for {
			c, err := p.ln.Accept()
			if err != nil {
				return
			}
			go p.handle(c)
		}
	}()
}

// addr is the proxy's host:port, the member's advertised peer address.
func (p *peerProxy) addr() string { return p.ln.Addr().String() }

// setIDs records which member index each etcd member ID is.
func (n *peerNetwork) setIDs(ids map[uint64]int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for id, i := range ids {
		n.ids[id] = i
	}
}

// partition cuts member i off its peers: new connections to or from it are
// refused and the open ones are closed.
func (n *peerNetwork) partition(i int) {
	n.mu.Lock()
	n.partitioned[i] = true
	var cut []*proxiedConn
	for c := range n.conns {
		if n.involvesLocked(c, i) {
			cut = append(cut, c)
			delete(n.conns, c)
		}
	}
	n.mu.Unlock()
	for _, c := range cut {
		c.close()
	}
}

// heal lets member i's peer connections through again; its peers redial
// by themselves.
func (n *peerNetwork) heal(i int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.partitioned, i)
}

// involvesLocked reports whether c goes to or comes from member i.
func (n *peerNetwork) involvesLocked(c *proxiedConn, i int) bool {
	if c.to == i {
		return true
	}
	if !c.hasFrom {
		return false
	}
	from, ok := n.ids[c.fromID]
	return ok && from == i
}

// allowedLocked reports whether c may pass now.
func (n *peerNetwork) allowedLocked(c *proxiedConn) bool {
	if n.closed {
		return false
	}
	for i := range n.partitioned {
		if n.involvesLocked(c, i) {
			return false
		}
	}
	return true
}

// close stops every proxy and closes every connection.
func (n *peerNetwork) close() {
	n.mu.Lock()
	n.closed = true
	proxies := n.proxies
	conns := n.conns
	n.conns = map[*proxiedConn]struct{}{}
	n.mu.Unlock()
	for _, p := range proxies {
		_ = p.ln.Close()
		<-p.done
	}
	for c := range conns {
		c.close()
	}
}

func (p *peerProxy) handle(client net.Conn) {
	c := &proxiedConn{to: p.index, client: client}
	// A connection to a partitioned member is refused before reading it.
	p.net.mu.Lock()
	refused := !p.net.allowedLocked(c)
	p.net.mu.Unlock()
	if refused {
		_ = client.Close()
		return
	}
	head, from, ok, err := readPeerHeader(client)
	if err != nil {
		_ = client.Close()
		return
	}
	c.fromID, c.hasFrom = from, ok
	p.net.mu.Lock()
	if !p.net.allowedLocked(c) {
		p.net.mu.Unlock()
		_ = client.Close()
		return
	}
	// Registered before the dial, so that a partition meanwhile closes it.
	p.net.conns[c] = struct{}{}
	p.net.mu.Unlock()
	defer func() {
		p.net.mu.Lock()
		delete(p.net.conns, c)
		p.net.mu.Unlock()
		c.close()
	}()

	backend, err := net.DialTimeout("tcp", p.backend, peerDialTimeout)
	if err != nil {
		return
	}
	if !c.setBackend(backend) {
		return
	}
	if _, err := backend.Write(head); err != nil {
		return
	}
	splice(client, backend)
}

// readPeerHeader reads the first request header of a connection, with a
// bounded size and time, and returns every byte it read (to be replayed to
// the member) and the X-Server-From member ID, if any.
func readPeerHeader(c net.Conn) (head []byte, from uint64, ok bool, err error) {
	if err := c.SetReadDeadline(time.Now().Add(peerHeaderTimeout)); err != nil {
		return nil, 0, false, err
	}
	var seen bytes.Buffer
	// The bufio reader may read past the header into the body: everything
	// read from the connection is kept in seen and replayed.
	r := bufio.NewReader(io.TeeReader(io.LimitReader(c, peerHeaderLimit), &seen))
	req, err := http.ReadRequest(r)
	if err != nil {
		return nil, 0, false, fmt.Errorf("reading a peer request header: %w", err)
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		return nil, 0, false, err
	}
	if h := req.Header.Get("X-Server-From"); h != "" {
		id, err := strconv.ParseUint(h, 16, 64)
		if err == nil {
			return seen.Bytes(), id, true, nil
		}
	}
	return seen.Bytes(), 0, false, nil
}

// splice copies both ways until both directions end or one fails; a
// direction's clean end is passed on as a half close.
func splice(a, b net.Conn) {
	errs := make(chan error, 2)
	cp := func(dst, src net.Conn) {
		_, err := io.Copy(dst, src)
		if err == nil {
			if cw, ok := dst.(interface{ CloseWrite() error }); ok {
				err = cw.CloseWrite()
			} else {
				err = errors.New("no half close")
			}
		}
		errs <- err
	}
	go cp(a, b)
	go cp(b, a)
	for range 2 {
		if err := <-errs; err != nil {
			// One direction failed: the other would hang on a half-dead
			// connection, so both are closed (again, harmlessly, when the
			// second one ends too).
			_ = a.Close()
			_ = b.Close()
		}
	}
}

func (c *proxiedConn) setBackend(b net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		_ = b.Close()
		return false
	}
	c.backend = b
	return true
}

func (c *proxiedConn) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	_ = c.client.Close()
	if c.backend != nil {
		_ = c.backend.Close()
	}
}
