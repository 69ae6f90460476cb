package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/redlockd/redlockd/api"
	"github.com/redlockd/redlockd/internal/fencedfloor"
)

// The stack floor: a bare server (see bare) that answers a cycle's two
// calls as the gateway does, built from the gateway's stack with none of
// its logic. POST /locks/{name} runs the fenced floor's acquire script on
// every node at once and, once a majority granted, answers 201 with a
// LockResponse written by api's generated code; DELETE runs the fenced
// floor's release script with the Lock-Token header and answers 204 once a
// majority answered; chi routes both, as the gateway's. The scripts go
// through each node's go-redis automatic pipeline, and one goroutine per
// node awaits them in the order sent, as the gateway's rounds do
// (redlock/batch.go); the nodes' clients are set as the gateway sets its
// own (redlock/node.go: RESP2, a pipeline pool of one, no maintenance
// notifications). No middleware (validation, authentication, access log,
// metrics), coordinator or lock scripts: what the gateway spends beyond it
// per cycle, in its own CPU and in the nodes', is what those cost
// (docs/measuring.md, Proposed targets).

// floorQueued bounds the commands queued for one node, as the gateway's
// maxQueued does.
const floorQueued = 4096

// floorNode is one node's automatic pipeline and the commands sent on it,
// in order, for its await goroutine.
type floorNode struct {
	pipe *redis.AutoPipeliner
	mu   sync.Mutex // keeps sent in the pipeline's order
	sent chan floorCmd
}

// floorCmd is a round's command on one node, and where its round awaits
// the answers.
type floorCmd struct {
	cmd     *redis.Cmd
	answers chan<- *redis.Cmd
}

// newFloorNode loads the fenced floor's scripts on the node at addr and
// starts its pipeline and its await goroutine (which lives as long as the
// process).
func newFloorNode(addr string) (*floorNode, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, PipelinePoolSize: 1,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	for _, s := range []*redis.Script{fencedfloor.Acquire, fencedfloor.Release} {
		if err := s.Load(context.Background(), c).Err(); err != nil {
			return nil, err
		}
	}
	pipe, err := c.AsyncAutoPipelineWithOptions(&redis.AutoPipelineOptions{MaxQueuedCommands: floorQueued})
	if err != nil {
		return nil, err
	}
	n := &floorNode{pipe: pipe, sent: make(chan floorCmd, 2*floorQueued+1)}
	go func() {
		for fc := range n.sent {
			_ = fc.cmd.Err() // waits until its batch has its replies
			fc.answers <- fc.cmd
		}
	}()
	return n, nil
}

// floorRound runs script with keys and args on every node at once and
// returns, once a majority answered it, the largest fence among their
// replies (the acquire's second element), or an error once too many failed
// for a majority.
func floorRound(ctx context.Context, nodes []*floorNode, script *redis.Script, keys []string, args ...any) (int64, error) {
	answers := make(chan *redis.Cmd, len(nodes))
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, "evalsha", script.Hash(), len(keys))
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	cmdArgs = append(cmdArgs, args...)
	for _, n := range nodes {
		cmd := redis.NewCmd(context.WithoutCancel(ctx), cmdArgs...)
		n.mu.Lock()
		err := n.pipe.Process(ctx, cmd)
		if err == nil {
			n.sent <- floorCmd{cmd, answers}
		}
		n.mu.Unlock()
		if err != nil {
			cmd.SetErr(err)
			answers <- cmd
		}
	}
	quorum := len(nodes)/2 + 1
	var fence int64
	var errs []error
	for ok := 0; ok < quorum; {
		cmd := <-answers
		if err := cmd.Err(); err != nil {
			if errs = append(errs, err); len(errs) > len(nodes)-quorum {
				return 0, errors.Join(errs...)
			}
			continue
		}
		ok++
		if v, _ := cmd.Slice(); len(v) > 1 {
			if f, _ := v[1].(int64); f > fence {
				fence = f
			}
		}
	}
	return fence, nil
}

// stackFloorHandler serves the stack floor's two calls on nodes.
func stackFloorHandler(nodes []*floorNode) http.Handler {
	quorum := len(nodes)/2 + 1
	var requests atomic.Uint64 // their ids (X-Request-Id, which a 201 carries)
	mux := chi.NewRouter()
	mux.Post("/locks/{name}", func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		var req api.AcquireRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.TTLMs == nil {
			http.Error(w, "a body with ttl_ms", http.StatusBadRequest)
			return
		}
		name, token, ttl := chi.URLParam(r, "name"), rand.Text(), *req.TTLMs
		fence, err := floorRound(r.Context(), nodes, fencedfloor.Acquire, []string{name, name + ":fence"}, token, ttl)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		validity := time.Duration(ttl)*time.Millisecond - time.Since(start)
		_ = api.AcquireLock201JSONResponse{Body: api.LockResponse{
			Resource: name, Token: token, FencingToken: fence, TTLMs: ttl, ValidityMs: validity.Milliseconds(),
			ExpiresAt: start.Add(validity).UTC().Format(time.RFC3339Nano), Nodes: len(nodes), Quorum: quorum, LockedNodes: quorum,
		}, Headers: api.AcquireLock201ResponseHeaders{
			Location: "/locks/" + name, XRequestId: strconv.FormatUint(requests.Add(1), 10)}}.VisitAcquireLockResponse(w)
	})
	mux.Delete("/locks/{name}", func(w http.ResponseWriter, r *http.Request) {
		name := chi.URLParam(r, "name")
		if _, err := floorRound(r.Context(), nodes, fencedfloor.Release, []string{name}, r.Header.Get("Lock-Token"), "", 60000); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}
