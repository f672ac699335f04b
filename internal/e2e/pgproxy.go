package e2e

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
)

// PGProxy is a TCP proxy in front of a Postgres server that can lose the
// acknowledgement of chosen commits: the server commits, the client's
// connection drops before the answer, and the client cannot tell whether
// its transaction happened. That is what a network cut or a server crash
// at the wrong moment does; here it is deterministic.
//
// A commit is chosen when LoseCommitAcks has armed the proxy and it
// commits a query containing the marker (such as the ledger's INSERT into
// delivery_attempts): the COMMIT of a transaction that sent one, or the
// Sync that ends a query of the extended protocol sent outside a
// transaction, which is its own transaction. The proxy waits for the
// server's whole answer before it cuts the client off; armed with
// LoseAnswersWithRows, it loses only answers that carry rows and passes
// the others on.
type PGProxy struct {
	ln     net.Listener
	target string
	marker string

	mu       sync.Mutex
	armed    int
	rowsOnly bool
	lost     int
	conns    map[net.Conn]struct{}
	closed   bool
	running  sync.WaitGroup
}

// StartPGProxy listens on 127.0.0.1 and forwards every connection to the
// Postgres server at target (host:port). It is closed when the test ends.
func StartPGProxy(t testing.TB, target, marker string) *PGProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("e2e: pg proxy: %v", err)
	}
	p := &PGProxy{ln: ln, target: target, marker: strings.ToLower(marker), conns: map[net.Conn]struct{}{}}
	p.running.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// URL is the URL of database name through the proxy.
func (p *PGProxy) URL(name string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", p.ln.Addr(), name)
}

// LoseCommitAcks arms the proxy to lose the acknowledgement of the next n
// chosen commits.
func (p *PGProxy) LoseCommitAcks(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed += n
}

// LoseAnswersWithRows arms the proxy to lose the answers of the next n
// chosen statements whose answers carry rows (a fetch that found jobs);
// the answers without rows go through.
func (p *PGProxy) LoseAnswersWithRows(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed += n
	p.rowsOnly = true
}

func (p *PGProxy) isArmed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.armed > 0
}

// Lost returns how many answers the proxy has lost.
func (p *PGProxy) Lost() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lost
}

// takeFor reports whether the proxy loses answer, taking one of the
// armed losses if so; rows says the transaction it commits answered rows
// before (its own answer, a COMMIT's, carries none).
func (p *PGProxy) takeFor(answer []byte, rows bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.armed == 0 || (p.rowsOnly && !rows && !hasDataRow(answer)) {
		return false
	}
	p.armed--
	p.lost++
	return true
}

func (p *PGProxy) accept() {
	defer p.running.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		if !p.track(client, server) {
			return
		}
		p.running.Add(1)
		go func() {
			defer p.running.Done()
			p.serve(client, server)
		}()
	}
}

func (p *PGProxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range conns {
			_ = c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *PGProxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}

// serve forwards one connection: server to client verbatim (until muted),
// client to server message by message, watching simple queries.
func (p *PGProxy) serve(client, server net.Conn) {
	defer p.untrack(client, server)
	// While held, the server's answer to a chosen commit is kept from the
	// client: once it is complete (its ReadyForQuery), the proxy decides
	// to lose it (cut the client off: the server ran it, the client
	// cannot tell) or, in the mode that loses only answers carrying rows,
	// to pass it on. The client sends the chosen commit only after the
	// answer to everything before it, so the held bytes start a message.
	var (
		mu       sync.Mutex
		held     bool
		kept     []byte
		answered chan struct{}
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 32<<10)
		for {
			n, err := server.Read(buf)
			if n > 0 {
				mu.Lock()
				if held {
					complete := readyForQuery(kept)
					kept = append(kept, buf[:n]...)
					if !complete && readyForQuery(kept) {
						close(answered)
					}
					mu.Unlock()
				} else {
					mu.Unlock()
					if _, werr := client.Write(buf[:n]); werr != nil {
						return
					}
				}
			}
			if err != nil {
				_ = client.Close()
				return
			}
		}
	}()
	defer func() { <-done }()
	defer server.Close()

	r := bufio.NewReaderSize(client, 32<<10)
	if err := p.forwardStartup(r, server); err != nil {
		return
	}
	// marked: the open transaction sent the marker; parsed: the last
	// query parsed holds it; pending: it was executed outside a
	// transaction, and the next Sync commits it (a Parse alone, which
	// pgx sends first to learn a statement's shape, runs nothing).
	marked, parsed, pending, inTx := false, false, false, false
	// peek: the next Sync ends a marked statement run in a transaction,
	// whose answer is read on its way (a fetch in a transaction, as the
	// windowed one, answers its rows there and commits after);
	// rowsInTx: such an answer carried rows, so in the mode that loses
	// only answers with rows, the transaction's COMMIT is the one to
	// lose: the server committed what the client never learns of.
	peek, rowsInTx := false, false
	// statements: whether each prepared statement's query holds the marker.
	statements := map[string]bool{}
	var head [5]byte
	for {
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint32(head[1:])) - 4
		if n < 0 {
			return
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		lose, peekNow := false, false
		switch head[0] {
		case 'Q': // a simple query
			sql := strings.ToLower(strings.TrimSpace(string(bytes.TrimRight(body, "\x00"))))
			switch {
			case sql == "begin":
				marked, inTx, rowsInTx = false, true, false
			case sql == "rollback":
				marked, inTx, rowsInTx = false, false, false
			case sql == "commit":
				lose = marked && p.isArmed()
				marked, inTx = false, false
			case strings.Contains(sql, p.marker):
				marked = true
			}
		case 'P': // Parse: the statement's name, then its query
			if name, rest, ok := bytes.Cut(body, []byte{0}); ok {
				sql, _, _ := bytes.Cut(rest, []byte{0})
				parsed = strings.Contains(strings.ToLower(string(sql)), p.marker)
				statements[string(name)] = parsed
			}
		case 'B': // Bind: the portal's name, then the statement's (prepared once, bound at every run)
			if _, rest, ok := bytes.Cut(body, []byte{0}); ok {
				name, _, _ := bytes.Cut(rest, []byte{0})
				parsed = statements[string(name)]
			}
		case 'E': // Execute the last statement bound
			if parsed && inTx {
				marked, peek = true, true
			} else if parsed {
				pending = true
			}
		case 'S': // Sync: outside a transaction, the queries before it commit
			lose = pending && !inTx && p.isArmed()
			peekNow = peek && inTx && !lose && p.isArmed()
			pending, peek = false, false
		}
		hold := lose || peekNow
		var wait chan struct{}
		if hold {
			mu.Lock()
			held, kept, answered = true, nil, make(chan struct{})
			wait = answered
			mu.Unlock()
		}
		if _, err := server.Write(append(head[:], body...)); err != nil {
			return
		}
		if hold {
			// The server runs the COMMIT (or the Sync) and answers; then
			// the client is cut off without the answer, or given it.
			select {
			case <-wait:
			case <-done:
				return
			}
			mu.Lock()
			answer := kept
			held, kept = false, nil
			mu.Unlock()
			if peekNow {
				rowsInTx = rowsInTx || hasDataRow(answer)
			} else if p.takeFor(answer, rowsInTx) {
				_ = client.Close()
				return
			}
			if lose {
				rowsInTx = false
			}
			if _, err := client.Write(answer); err != nil {
				return
			}
		}
	}
}

// hasDataRow reports whether b, backend messages from a message's start,
// holds a DataRow ('D'): the answer carried rows.
func hasDataRow(b []byte) bool {
	for len(b) >= 5 {
		n := int(binary.BigEndian.Uint32(b[1:5]))
		if n < 4 || len(b) < 1+n {
			return false
		}
		if b[0] == 'D' {
			return true
		}
		b = b[1+n:]
	}
	return false
}

// readyForQuery reports whether b, backend messages from a message's
// start, holds a ReadyForQuery ('Z'): the end of the server's answer.
func readyForQuery(b []byte) bool {
	for len(b) >= 5 {
		n := int(binary.BigEndian.Uint32(b[1:5]))
		if n < 4 || len(b) < 1+n {
			return false
		}
		if b[0] == 'Z' {
			return true
		}
		b = b[1+n:]
	}
	return false
}

// forwardStartup forwards the untyped startup packets (an SSL or GSS
// encryption request first, answered by one byte, then the startup
// message).
func (p *PGProxy) forwardStartup(r *bufio.Reader, server net.Conn) error {
	for {
		var head [8]byte
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint32(head[:4]))
		if n < 8 {
			return errors.New("bad startup packet")
		}
		rest := make([]byte, n-8)
		if _, err := io.ReadFull(r, rest); err != nil {
			return err
		}
		if _, err := server.Write(append(head[:], rest...)); err != nil {
			return err
		}
		switch binary.BigEndian.Uint32(head[4:]) {
		case 80877103, 80877104: // SSLRequest, GSSENCRequest: another packet follows
			continue
		}
		return nil
	}
}

func (p *PGProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.running.Wait()
}
