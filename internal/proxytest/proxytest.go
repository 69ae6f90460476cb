// Package proxytest runs toxiproxy for the tests and the bench: a
// toxiproxy-server process (github.com/Shopify/toxiproxy/v2/cmd/server, a
// tool of this module's go.mod) per set of proxies, on free 127.0.0.1
// ports, driven through its HTTP API and stopped by PID. A stall of the
// process that runs the proxies stalls every node behind them at once: out
// of the process that injects the faults, their timing depends on neither a
// test binary's race detector nor the bench's load generator (inside the
// race-built tests, on a loaded machine, they once held every node of a
// gateway past its 100 ms node timeout for over 15 s).
package proxytest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"

	"github.com/redlockd/redlockd/internal/redistest"
)

// serverPackage is the toxiproxy-server command.
const serverPackage = "github.com/Shopify/toxiproxy/v2/cmd/server"

// Build compiles toxiproxy-server to out, without -race or cgo. It runs the
// go command in dir, which must be in this module ("" for the current
// directory).
func Build(ctx context.Context, dir, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, serverPackage)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", serverPackage, err, b)
	}
	return nil
}

// Server is a toxiproxy-server process with a proxy in front of each of its
// upstreams.
type Server struct {
	// Proxies are in the order of the upstreams; each one's Listen is the
	// host:port to reach its upstream through.
	Proxies []*toxiproxy.Proxy
	API     string // the host:port of its HTTP API

	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// sets numbers the sets of proxies this process launches: their names (with
// the process's PID) tell a server of this set from any other's.
var sets atomic.Int64

// Launch starts the toxiproxy-server binary bin with a proxy on a free port
// of 127.0.0.1 in front of each upstream (host:port), its configuration
// written in dir. Stop stops it.
func Launch(bin, dir string, upstreams []string) (*Server, error) {
	if len(upstreams) == 0 {
		return nil, errors.New("toxiproxy-server: no upstream") // nothing to tell it by
	}
	set := fmt.Sprintf("p%d-%d", os.Getpid(), sets.Add(1))
	config := make([]toxiproxy.Proxy, len(upstreams))
	for i, u := range upstreams {
		config[i] = toxiproxy.Proxy{Name: set + "-" + strconv.Itoa(i), Listen: "127.0.0.1:0", Upstream: u, Enabled: true}
	}
	b, err := json.Marshal(config)
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(dir, "toxiproxy-*.json")
	if err != nil {
		return nil, err
	}
	_, err = f.Write(b)
	if err = errors.Join(err, f.Close()); err != nil {
		return nil, err
	}
	for range 10 { // another process may take the port before the server binds it
		var port int
		if port, err = redistest.FreePort(); err != nil {
			break
		}
		var s *Server
		if s, err = spawn(bin, f.Name(), config, port); err == nil {
			return s, nil
		}
	}
	return nil, fmt.Errorf("toxiproxy-server: %w", err)
}

// spawn runs bin with its API on port and the proxies of the configuration
// file, and waits until its API lists them: a server without them is
// another's on the port, which this one failed to bind. On failure the
// process is gone and the error has its output.
func spawn(bin, file string, config []toxiproxy.Proxy, port int) (*Server, error) {
	cmd := exec.Command(bin, "-host", "127.0.0.1", "-port", strconv.Itoa(port), "-config", file)
	cmd.Env = append(os.Environ(), "LOG_LEVEL=warn")
	var out bytes.Buffer // read only once the process has exited
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &Server{API: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()
	api := toxiproxy.NewClient(s.API)
	for deadline := time.Now().Add(10 * time.Second); ; {
		listed, err := api.Proxies()
		if err == nil {
			if s.Proxies, err = ours(listed, config); err == nil {
				return s, nil
			}
		} else if time.Now().Before(deadline) {
			select {
			case <-s.done:
				err = errors.New("exited at start")
			case <-time.After(10 * time.Millisecond): // polling for readiness: no event to await
				continue
			}
		}
		s.Stop()
		return nil, fmt.Errorf("on port %d: %w: %s", port, err, bytes.TrimSpace(out.Bytes()))
	}
}

// ours picks the proxies of config out of those a server listed.
func ours(listed map[string]*toxiproxy.Proxy, config []toxiproxy.Proxy) ([]*toxiproxy.Proxy, error) {
	out := make([]*toxiproxy.Proxy, len(config))
	for i, c := range config {
		if out[i] = listed[c.Name]; out[i] == nil {
			return nil, fmt.Errorf("no proxy %s: another toxiproxy-server's port", c.Name)
		}
	}
	return out, nil
}

// PID is the server's process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Stop kills the server by PID and waits for it to exit.
func (s *Server) Stop() {
	_ = s.cmd.Process.Kill()
	<-s.done
}
