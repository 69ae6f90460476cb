package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/redlock"
)

// cycle runs one acquire+release cycle of worker w on its resource key.
type cycle func(ctx context.Context, w int, key string) error

// result is one run's figures.
type result struct {
	name           string
	c              int
	cycles, errors int
	lastErr        string
	duration       time.Duration
	p50, p99, max  time.Duration
}

func (r result) perSecond() float64 { return float64(r.cycles) / r.duration.Seconds() }

// runCycles runs cy from c workers for d and times each cycle. A cycle cut
// off by the end of the run is not counted.
func runCycles(ctx context.Context, name string, c int, d time.Duration, cy cycle) result {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	end, _ := ctx.Deadline()
	r := result{name: name, c: c}
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	start := time.Now()
	for w := range c {
		wg.Go(func() {
			// After an error the worker takes a new key: a lock whose release
			// failed must not refuse it every cycle until its TTL ends.
			for key := strconv.Itoa(w); ctx.Err() == nil; {
				t0 := time.Now()
				err := cy(ctx, w, key)
				if ctx.Err() != nil || !time.Now().Before(end) {
					return
				}
				mu.Lock()
				if lat = append(lat, time.Since(t0)); err != nil {
					lat, r.errors, r.lastErr = lat[:len(lat)-1], r.errors+1, strings.ReplaceAll(err.Error(), "\n", "; ")
					key = fmt.Sprintf("%d-%d", w, r.errors)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	r.duration = time.Since(start)
	slices.Sort(lat)
	r.cycles, r.p50, r.p99, r.max = len(lat), pct(lat, 0.5), pct(lat, 0.99), pct(lat, 1)
	return r
}

// pct is the p-quantile of sorted ds, 0 when there are none.
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[min(len(ds)-1, int(p*float64(len(ds))))]
}

// newHTTPClient is a net/http client that keeps up to c connections alive.
func newHTTPClient(c int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = c, c
	return &http.Client{Transport: tr}
}

// send sends method to the lock at u, with body or with the lock's token,
// and returns the status (0 on a transport error) and the token of a 201.
func send(ctx context.Context, hc *http.Client, method, u, body, token string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Lock-Token", token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var lock struct{ Token string }
	if resp.StatusCode == http.StatusCreated {
		err = json.NewDecoder(resp.Body).Decode(&lock)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, lock.Token, err
}

// lockCycle acquires the lock at u with body, holds it for hold and
// releases it. It returns the acquire's status and when the 201 and the 204
// came. The release goes on after ctx ends, so that the next run finds the
// lock free, and gives up after 5s.
func lockCycle(ctx context.Context, hc *http.Client, u, body string, hold time.Duration) (status int, acquired, released time.Time, err error) {
	status, token, err := send(ctx, hc, http.MethodPost, u, body, "")
	if err == nil && status != http.StatusCreated {
		err = fmt.Errorf("acquire: status %d", status)
	}
	if err != nil {
		return status, acquired, released, err
	}
	acquired = time.Now()
	time.Sleep(hold)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if s, _, err := send(ctx, hc, http.MethodDelete, u, "", token); err != nil || s != http.StatusNoContent {
		return status, acquired, released, errors.Join(fmt.Errorf("release: status %d", s), err)
	}
	return status, acquired, time.Now(), nil
}

// gatewayCycle locks and unlocks <prefix><worker> on the gateway over HTTP.
func gatewayCycle(base, prefix string, c int) (cycle, func(), error) {
	hc := newHTTPClient(c)
	return func(ctx context.Context, _ int, key string) error {
		_, _, _, err := lockCycle(ctx, hc, base+"/locks/"+prefix+key, `{"ttl_ms":10000}`, 0)
		return err
	}, hc.CloseIdleConnections, nil
}

// options are go-redis options for the nodes, with a connection per worker
// of c, so that an in-process library waits for Redis, not for its pool.
func options(nodes []string, c int) []*redis.Options {
	opts := make([]*redis.Options, len(nodes))
	for i, addr := range nodes {
		opts[i] = &redis.Options{Addr: addr, PoolSize: c + 10}
	}
	return opts
}

// inProcess is an acquire+release cycle of <prefix><worker> with a library
// in-process: lock takes the lock and returns how to release it.
func inProcess(prefix string, lock func(ctx context.Context, res string) (func(context.Context) error, error)) cycle {
	return func(ctx context.Context, _ int, key string) error {
		unlock, err := lock(ctx, prefix+key)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second) // release even after the run
		defer cancel()
		return unlock(ctx)
	}
}

// libraryCycle is inProcess with the redlock library, with or without
// batching.
func libraryCycle(nodes []string, prefix string, c int, noBatching bool, timeout time.Duration) (cycle, func(), error) {
	lib, err := redlock.New(options(nodes, c), redlock.Options{NoQuarantine: true, NoBatching: noBatching, NodeTimeout: timeout})
	if err != nil {
		return nil, nil, err
	}
	return inProcess(prefix, func(ctx context.Context, res string) (func(context.Context) error, error) {
		l, err := lib.Acquire(ctx, res, redlock.AcquireOptions{TTL: 10 * time.Second})
		return func(ctx context.Context) error { return lib.Release(ctx, "", res, l.Token) }, err
	}), func() { lib.Close() }, nil
}

// redsyncCycle is inProcess with redsync, a go-redis client per node, one
// try per lock.
func redsyncCycle(nodes []string, prefix string, c int) (cycle, func(), error) {
	opts := options(nodes, c)
	clients, pools := make([]*redis.Client, len(opts)), make([]redsyncredis.Pool, len(opts))
	for i, o := range opts {
		clients[i] = redis.NewClient(o)
		pools[i] = goredis.NewPool(clients[i])
	}
	rs := redsync.New(pools...)
	return inProcess(prefix, func(ctx context.Context, res string) (func(context.Context) error, error) {
			m := rs.NewMutex(res, redsync.WithExpiry(10*time.Second), redsync.WithTries(1))
			return func(ctx context.Context) error {
				if ok, err := m.UnlockContext(ctx); !ok || err != nil {
					return errors.Join(errors.New("redsync: unlock failed"), err)
				}
				return nil
			}, m.LockContext(ctx)
		}), func() {
			for _, rc := range clients {
				rc.Close()
			}
		}, nil
}

// contended is what a contended run measured.
type contended struct {
	run result
	// handoff holds the times from one holder's 204 to its release to the
	// next holder's 201, sorted.
	handoff []time.Duration
	// same is the share of acquisitions won by the client that held the lock
	// just before.
	same float64
}

// contend runs clients that take turns on one lock of the gateway at base
// for d, asking with wait_ms: each takes it, holds it for hold, releases it
// and at once asks again.
func contend(ctx context.Context, base, resource string, clients int, hold, d time.Duration) contended {
	hc := newHTTPClient(clients)
	defer hc.CloseIdleConnections()
	type turn struct {
		client             int
		acquired, released time.Time
	}
	var mu sync.Mutex
	var turns []turn
	u := base + "/locks/" + resource
	r := contended{run: runCycles(ctx, "contended", clients, d, func(ctx context.Context, w int, _ string) error {
		_, acquired, released, err := lockCycle(ctx, hc, u, `{"ttl_ms":10000,"wait_ms":5000}`, hold)
		if err == nil {
			mu.Lock()
			turns = append(turns, turn{w, acquired, released})
			mu.Unlock()
		}
		return err
	})}
	slices.SortFunc(turns, func(a, b turn) int { return a.acquired.Compare(b.acquired) })
	same := 0
	for i := 1; i < len(turns); i++ {
		r.handoff = append(r.handoff, max(0, turns[i].acquired.Sub(turns[i-1].released)))
		if turns[i].client == turns[i-1].client {
			same++
		}
	}
	slices.Sort(r.handoff)
	r.same = float64(same) / float64(max(1, len(r.handoff)))
	return r
}
