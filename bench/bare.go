package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/internal/fencedfloor"
)

// The bare servers: this program again, in a process of its own as the
// gateway is and at its GOMAXPROCS (a server in the tool's process would skip
// the wake-up of another process, which costs most of a round trip), doing
// none of the gateway's work. With no nodes it answers at once: the HTTP hops
// of a cycle (bareMode). With nodes it answers a POST once one round of the
// fenced floor's acquire script, sent to every node at once, has a majority
// of answers: the critical path of a hand-over (a request in, one round of
// the nodes, an answer out) with none of the lock's logic (handOverFloorMode).
// With nodes and bareCycle it is the stack floor (stackfloor.go,
// stackFloorMode).

const (
	// bareServer is the environment variable that makes this program a bare
	// server (see bare).
	bareServer = "REDLOCKD_BENCH_BARE"
	// bareNodes lists the nodes (host:port, separated by commas) on which a
	// bare server runs its round.
	bareNodes = "REDLOCKD_BENCH_BARE_NODES"
	// bareCycle makes a bare server on nodes the stack floor.
	bareCycle = "REDLOCKD_BENCH_BARE_CYCLE"
)

// serveBareIfAsked makes this process a bare server, and never returns, if
// the environment asks: it listens on a free port of 127.0.0.1, writes its
// address and a newline to stdout, and answers 201 to a POST (after its
// round, with nodes), else 204; or serves the stack floor.
func serveBareIfAsked() {
	if os.Getenv(bareServer) == "" {
		return
	}
	err := serveBare(os.Getenv(bareNodes), os.Getenv(bareCycle) != "")
	fmt.Fprintln(os.Stderr, "bench: bare server:", err)
	os.Exit(1)
}

// serveBare serves as serveBareIfAsked says, on nodes (host:port, separated
// by commas; none if empty), as the stack floor with cycle.
func serveBare(nodes string, cycle bool) error {
	round := func(context.Context, string) error { return nil }
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusNoContent)
		} else if err := round(r.Context(), r.URL.Path); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		} else {
			w.WriteHeader(http.StatusCreated)
		}
	})
	switch {
	case nodes != "" && cycle:
		var fns []*floorNode
		for _, addr := range strings.Split(nodes, ",") {
			n, err := newFloorNode(addr)
			if err != nil {
				return err
			}
			fns = append(fns, n)
		}
		h = stackFloorHandler(fns)
	case nodes != "":
		round = quorumRound(strings.Split(nodes, ","))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr())
	return http.Serve(ln, h)
}

// quorumRound runs the fenced floor's acquire script on the key res at every
// node of addrs at once, a goroutine each, and returns once a majority of
// them answered it (the others answer in the background), or too many
// failed for one. A new token each time: each round takes the key anew.
func quorumRound(addrs []string) func(ctx context.Context, res string) error {
	opts := make([]*redis.Options, len(addrs))
	for i, a := range addrs {
		opts[i] = &redis.Options{Addr: a}
	}
	clients, _ := nodeClients(opts) // closed as the process exits
	quorum := len(clients)/2 + 1
	return func(ctx context.Context, res string) error {
		keys, token := []string{res, res + ":fence"}, strconv.FormatUint(rand.Uint64(), 36)
		answers := make(chan error, len(clients))
		for _, c := range clients {
			go func() { answers <- fencedfloor.Acquire.Run(context.WithoutCancel(ctx), c, keys, token, 10000).Err() }()
		}
		var errs []error
		for ok := 0; ok < quorum; {
			if err := <-answers; err == nil {
				ok++
			} else if errs = append(errs, err); len(errs) > len(clients)-quorum {
				return errors.Join(errs...)
			}
		}
		return nil
	}
}

// bareProc is a bare server's process.
type bareProc struct {
	url  string // http://host:port
	pid  int
	stop func()
}

// startBare starts a bare server with the environment env (on nodes, if any;
// the stack floor with cycle).
func startBare(env []string, nodes []string, cycle bool) (*bareProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(env, bareServer+"=1", bareNodes+"="+strings.Join(nodes, ","))
	if cycle {
		cmd.Env = append(cmd.Env, bareCycle+"=1")
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &bareProc{pid: cmd.Process.Pid, stop: func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }}
	// It listens before it writes its address; it writes nothing if it
	// fails (then stdout closes).
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		p.stop()
		return nil, fmt.Errorf("the bare server did not start: %v", err)
	}
	p.url = "http://" + strings.TrimSpace(addr)
	return p, nil
}

// bare starts a bare server (on nodes, if any) with the environment env and
// returns a locker on it: a cycle's two requests, or with nodes its POST
// alone (its round stands for a hand-over; the release sends nothing).
func bare(hc *http.Client, env []string, nodes []string) (locker, *bareProc, error) {
	p, err := startBare(env, nodes, false)
	if err != nil {
		return nil, nil, err
	}
	do := func(ctx context.Context, method, res string) error {
		req, _ := http.NewRequestWithContext(ctx, method, p.url+"/locks/"+res, strings.NewReader(`{"ttl_ms":10000}`))
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		if err := resp.Body.Close(); err != nil || resp.StatusCode < 300 {
			return err
		}
		return fmt.Errorf("the bare server answered %s", resp.Status)
	}
	if len(nodes) > 0 {
		return func(ctx context.Context, res string) (func(context.Context) error, error) {
			return func(context.Context) error { return nil }, do(ctx, http.MethodPost, res)
		}, p, nil
	}
	return func(ctx context.Context, res string) (func(context.Context) error, error) {
		return func(ctx context.Context) error { return do(ctx, http.MethodDelete, res) }, do(ctx, http.MethodPost, res)
	}, p, nil
}
