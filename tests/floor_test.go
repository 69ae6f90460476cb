package tests

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// floorEnv makes the test binary, started again with it set, serve a
// trivial HTTP handler instead of running tests: what any Go HTTP gateway
// costs at the least, in a process of its own like the gateway, for
// TestLoad to measure beside the gateway.
const floorEnv = "REDLOCKD_TESTS_HTTP_FLOOR"

// serveFloor listens on a free loopback port, prints its address, and
// answers what the load tool's cycle expects of a gateway (201 with a token
// to a POST, 204 to a DELETE) without doing anything else.
func serveFloor() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(ln.Addr())
	err = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"token":"floorAAAAAAAAAAAAAAAAAAAAAAAAAA","fencing_token":1}`)
	}))
	fmt.Fprintln(os.Stderr, err)
	return 1
}

// startFloor runs the floor server (see floorEnv) and returns its URL. It is
// stopped, by PID, when the test ends.
func startFloor(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), floorEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("floor server: %v", err)
	}
	return "http://" + strings.TrimSpace(addr)
}
