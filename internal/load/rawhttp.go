package load

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"
)

// rawConn is a minimal HTTP/1.1 keep-alive client on one connection, for
// load generation: it writes pre-formatted requests and reads status, headers
// and body, so that the load generator spends little CPU next to the server
// it measures (as wrk does). It speaks only what the gateway answers.
type rawConn struct {
	addr string
	host string
	conn net.Conn
	r    *bufio.Reader
	buf  []byte
}

func newRawConn(baseURL string) (*rawConn, error) {
	u, err := url.Parse(baseURL)
	if err != nil || u.Scheme != "http" {
		return nil, fmt.Errorf("raw HTTP client: need an http:// URL, got %q", baseURL)
	}
	return &rawConn{addr: u.Host, host: u.Host}, nil
}

// do sends one request and returns the status and body. It (re)connects
// as needed, and gives up at deadline: the connection is then closed, so
// that the server drops the request (a wait, say). A deadline on the
// connection, rather than a context watched per request, keeps the load
// generator's own cost per request low.
func (c *rawConn) do(deadline time.Time, method, path, header, body string) (int, []byte, error) {
	if c.conn == nil {
		d := net.Dialer{Deadline: deadline}
		conn, err := d.Dial("tcp", c.addr)
		if err != nil {
			return 0, nil, err
		}
		c.conn, c.r = conn, bufio.NewReaderSize(conn, 4096)
	}
	if err := c.conn.SetDeadline(deadline); err != nil {
		c.close()
		return 0, nil, err
	}
	b := append(c.buf[:0], method...)
	b = append(b, ' ')
	b = append(b, path...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, c.host...)
	b = append(b, "\r\n"...)
	b = append(b, header...)
	b = append(b, "Content-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n"...)
	if body != "" {
		b = append(b, "Content-Type: application/json\r\n"...)
	}
	b = append(b, "\r\n"...)
	b = append(b, body...)
	c.buf = b
	if _, err := c.conn.Write(b); err != nil {
		c.close()
		return 0, nil, err
	}
	status, out, err := c.read()
	if err != nil {
		c.close()
	}
	return status, out, err
}

func (c *rawConn) read() (int, []byte, error) {
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return 0, nil, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return 0, nil, fmt.Errorf("bad status line %q", line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, nil, err
	}
	length, closeAfter := 0, false
	for {
		line, err = c.r.ReadSlice('\n')
		if err != nil {
			return 0, nil, err
		}
		if len(line) <= 2 {
			break
		}
		name, value, ok := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(":"))
		if !ok {
			continue
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil {
				return 0, nil, err
			}
		case bytes.EqualFold(name, []byte("Connection")) && bytes.EqualFold(value, []byte("close")):
			closeAfter = true
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return 0, nil, errors.New("chunked responses are not supported")
		}
	}
	body := make([]byte, length)
	if _, err := ioReadFull(c.r, body); err != nil {
		return 0, nil, err
	}
	if closeAfter {
		c.close()
	}
	return status, body, nil
}

func (c *rawConn) close() {
	if c.conn != nil {
		_ = c.conn.Close()
		c.conn = nil
	}
}

func ioReadFull(r *bufio.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := r.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// releaseTimeout bounds a release (a variable for tests).
var releaseTimeout = 5 * time.Second

// RawHTTPCycle is an acquire+release cycle on one raw keep-alive
// connection per worker (c workers at most): each worker locks
// /locks/<prefix><worker>, or all lock /locks/<prefix>contended when
// contended, asking with wait_ms = wait.
func RawHTTPCycle(baseURL, prefix string, c int, wait time.Duration, contended bool) (Cycle, error) {
	conns := make([]*rawConn, c)
	paths := make([]string, c)
	for i := range conns {
		rc, err := newRawConn(baseURL)
		if err != nil {
			return nil, err
		}
		conns[i] = rc
		paths[i] = "/locks/" + prefix + strconv.Itoa(i)
		if contended {
			paths[i] = "/locks/" + prefix + "contended"
		}
	}
	reqBody := fmt.Sprintf(`{"ttl_ms":10000,"wait_ms":%d}`, wait.Milliseconds())
	return func(ctx context.Context, w int) error {
		rc, path := conns[w], paths[w]
		// The acquire gives up when the run ends (its context's deadline).
		deadline, ok := ctx.Deadline()
		if !ok {
			deadline = time.Now().Add(wait + releaseTimeout)
		}
		status, body, err := rc.do(deadline, "POST", path, "", reqBody)
		if err != nil {
			return err
		}
		if status != 201 {
			return fmt.Errorf("acquire: status %d", status)
		}
		token := tokenOf(body)
		if token == "" {
			return fmt.Errorf("acquire: no token in %q", body)
		}
		// Release even when the run ends meanwhile.
		status, _, err = rc.do(time.Now().Add(releaseTimeout), "DELETE", path, "Lock-Token: "+token+"\r\n", "")
		if err != nil {
			return err
		}
		if status != 204 {
			return fmt.Errorf("release: status %d", status)
		}
		return nil
	}, nil
}

// tokenOf finds "token":"…" in a lock body without a full JSON decode.
func tokenOf(body []byte) string {
	_, rest, ok := bytes.Cut(body, []byte(`"token":"`))
	if !ok {
		return ""
	}
	tok, _, ok := bytes.Cut(rest, []byte(`"`))
	if !ok {
		return ""
	}
	return string(tok)
}
