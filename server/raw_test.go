package server

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/redlockd/redlockd/redlock"
)

// TestRawPath sends request lines byte for byte over TCP, so that the
// percent-decoding is net/http's, chi's and the generated code's, not the
// test client's.
func TestRawPath(t *testing.T) {
	f := newFake(t)
	acquired := make(chan string, 1)
	f.AcquireFn = func(_ context.Context, resource string, o redlock.AcquireOptions) (redlock.Lock, error) {
		acquired <- resource
		return testLock(resource, tokenA, o.TTL), nil
	}
	_, h := newHandler(f, nil)
	srv := httptest.NewServer(h)
	defer srv.Close()

	for _, tc := range []struct {
		path     string
		status   int
		resource string
	}{
		{"/locks/a%2Fb", 400, ""},
		{"/locks/a%2fb", 400, ""},
		{"/locks/a/b", 404, ""},
		{"/locks/a%252Fb", 400, ""},
		{"/locks/a%41", 201, "aA"},
		{"/locks/a%3Ab", 201, "a:b"},
		{"/locks/a:b", 201, "a:b"},
	} {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", tc.path)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		conn.Close()
		if resp.StatusCode != tc.status || resp.Header.Get("X-Request-Id") == "" {
			t.Errorf("POST %s: got %d, want %d", tc.path, resp.StatusCode, tc.status)
		}
		if tc.resource != "" {
			if got := <-acquired; got != tc.resource {
				t.Errorf("POST %s: Acquire got %q, want %q", tc.path, got, tc.resource)
			}
			if exp, loc := "/locks/"+tc.resource, resp.Header.Get("Location"); loc != exp {
				t.Errorf("POST %s: Location %q, want %q", tc.path, loc, exp)
			}
		}
	}
}
