package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"

	"github.com/redlockd/redlockd/client"
	"github.com/redlockd/redlockd/internal/proxytest"
	"github.com/redlockd/redlockd/internal/redistest"
)

// The gray floors: a paused or slow minority of nodes never slows a request
// (docs/safety.md, what happens in each fault). A gateway per node timeout reaches every node through a
// toxiproxy proxy, so that a node can be made slow: in a toxiproxy-server
// process of its own, whose proxies this tool's load cannot stall
// (internal/proxytest). A node is paused with SIGSTOP (redistest's Pause is
// for tests only).

// scenario is a gray failure: the first paused nodes are stopped, the next
// slow ones answer twice the node timeout late.
type scenario struct {
	name         string
	paused, slow int
}

// scenarios are run in turn for each node timeout, the healthy one first:
// the others are measured against it. Each runs twice, half the duration
// each time, all of them in turn and then again, so that a drift of the
// machine's speed shows on the healthy run as on the others.
var scenarios = []scenario{{"healthy", 0, 0}, {"1 of 5 paused", 1, 0}, {"2 of 5 paused", 2, 0}, {"1 of 5 slow", 0, 1}, {"2 of 5 slow", 0, 2}}

// down is the scenario of the acquires that must get a 503.
var down = scenario{"3 of 5 paused", 3, 0}

func grayName(nodeTimeout time.Duration, s string) string {
	return fmt.Sprintf("gateway, node timeout %v, %s", nodeTimeout, s)
}

// grayResult is what the acquires measured with 3 of 5 nodes paused on the
// gateway with nodeTimeout: the times of their 503s, and what the others
// got.
type grayResult struct {
	nodeTimeout time.Duration
	tries       int
	to503       sample
	lastErr     string
}

// measureGray runs the scenarios with c.grayClients workers for each of
// c.grayTimeouts, then the acquires with 3 of 5 paused, each on a gateway
// and proxies of its own (see faulted).
func measureGray(ctx context.Context, l *lab, c *config, prefix string, progress io.Writer) (runs []result, gray []grayResult, err error) {
	srv := filepath.Join(l.dir, "toxiproxy-server")
	if err := proxytest.Build(ctx, "", srv); err != nil {
		return nil, nil, fmt.Errorf("%w (run bench in the module)", err)
	}
	for _, d := range c.grayTimeouts {
		for k := range 2 * len(scenarios) {
			i := k % len(scenarios)
			s := scenarios[i]
			fmt.Fprintf(progress, "%s at C=%d for %v\n", grayName(d, s.name), c.grayClients, c.duration/2)
			err := l.faulted(ctx, srv, d, s, func(g *lab) error {
				r, err := mode{group: "gray", name: gatewayMode, c: c.grayClients, noCost: true}.run(ctx, g, fmt.Sprintf("%s%v-%d-", prefix, d, k), c.duration/2)
				if err == nil {
					r.name = grayName(d, s.name)
					runs, _ = merge(runs, r)
				}
				return err
			})
			if err == nil {
				err = ctx.Err()
			}
			if err != nil {
				return runs, gray, err
			}
		}
		res := grayResult{nodeTimeout: d, tries: 20}
		fmt.Fprintf(progress, "%s: %d acquires\n", grayName(d, down.name), res.tries)
		err := l.faulted(ctx, srv, d, down, func(g *lab) error {
			for i := range res.tries {
				start := time.Now()
				actx, cancel := context.WithTimeout(ctx, 10*d) // a 503 comes after about one node timeout
				_, err := g.client.Acquire(actx, fmt.Sprintf("%s%v-down-%d", prefix, d, i), client.AcquireOptions{TTL: 10 * time.Second})
				cancel()
				if errors.Is(err, client.ErrQuorumUnavailable) {
					res.to503 = append(res.to503, time.Since(start))
				} else {
					res.lastErr = fmt.Sprintf("acquire: %v", err) // nil: acquired
				}
			}
			return ctx.Err()
		})
		slices.Sort(res.to503)
		gray = append(gray, res)
		if err != nil {
			return runs, gray, err
		}
	}
	return runs, gray, nil
}

// faulted runs f on a gateway of its own with node timeout d, which reaches
// each node through a fresh toxiproxy proxy (a toxiproxy-server process
// started from the binary srv), once the gateway is ready and s's faults
// are on: its paused nodes stopped, its slow ones delayed by d each way.
// Then it stops the gateway, resumes every node and stops the proxies'
// process, toxics and all. No toxic is ever removed: toxiproxy can deadlock
// removing one while a link fails to write to a connection the gateway
// closed on a timeout (Shopify/toxiproxy#558), which the slow scenarios
// make happen all the time.
func (l *lab) faulted(ctx context.Context, srv string, d time.Duration, s scenario, f func(*lab) error) error {
	ps, err := proxytest.Launch(srv, l.dir, l.nodes)
	if err != nil {
		return err
	}
	defer ps.Stop()
	proxies, addrs := ps.Proxies, make([]string, len(l.nodes))
	for i, p := range proxies {
		addrs[i] = p.Listen
	}
	g := *l // the same nodes and transport, another gateway
	stop, err := g.serve(ctx, addrs, d)
	if err != nil {
		return err
	}
	defer kill(l.servers, syscall.SIGCONT) // after the gateway stopped, before the proxies
	defer stop()
	kill(l.servers[:s.paused], syscall.SIGSTOP)
	for _, p := range proxies[s.paused : s.paused+s.slow] {
		for _, stream := range []string{"upstream", "downstream"} { // a round trip of 2d
			if _, err := p.AddToxic("", "latency", stream, 1, toxiproxy.Attributes{"latency": d.Milliseconds()}); err != nil {
				return fmt.Errorf("latency on %s: %w", p.Upstream, err)
			}
		}
	}
	return f(&g)
}

// kill sends sig to the nodes' processes that run (pid 0 would be this
// process group): SIGSTOP pauses a node, whose socket still accepts
// connections while nothing is answered; SIGCONT resumes it.
func kill(nodes []*redistest.Server, sig syscall.Signal) {
	for _, n := range nodes {
		if pid := n.PID(); pid > 0 {
			_ = syscall.Kill(pid, sig)
		}
	}
}
