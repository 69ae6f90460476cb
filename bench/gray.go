package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"syscall"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"github.com/redlockd/redlockd/client"
	"github.com/redlockd/redlockd/internal/redistest"
)

// The gray floors: a paused or slow minority of nodes never slows a request
// (docs/safety.md, what happens in each fault). A gateway per node timeout reaches every node through a
// toxiproxy proxy run in this process, so that a node can be made slow;
// a node is paused with SIGSTOP (redistest's Pause is for tests only).

// scenario is a gray failure: the first paused nodes are stopped, the next
// slow ones answer twice the node timeout late.
type scenario struct {
	name         string
	paused, slow int
}

// scenarios are run in turn on each gateway, the healthy one first: the
// others are measured against it.
var scenarios = []scenario{{"healthy", 0, 0}, {"1 of 5 paused", 1, 0}, {"2 of 5 paused", 2, 0}, {"1 of 5 slow", 0, 1}, {"2 of 5 slow", 0, 2}}

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
// c.grayTimeouts, then the acquires with 3 of 5 paused. Every node is
// resumed and every toxic removed after each scenario and at the end.
func measureGray(ctx context.Context, l *lab, c *config, prefix string, progress io.Writer) (runs []result, gray []grayResult, err error) {
	proxies := make([]*toxiproxy.Proxy, len(l.nodes))
	addrs := make([]string, len(l.nodes))
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	for i, n := range l.nodes {
		p := toxiproxy.NewProxy(srv, n, "127.0.0.1:0", n)
		if err := p.Start(); err != nil {
			return nil, nil, fmt.Errorf("proxy for %s: %w", n, err)
		}
		defer p.Stop()
		proxies[i], addrs[i] = p, p.Listen
	}
	defer heal(l.servers, proxies)
	for _, d := range c.grayTimeouts {
		g := *l // the same nodes and transport, another gateway
		stop, err := g.serve(ctx, addrs, d)
		if err != nil {
			return runs, gray, err
		}
		r, down, err := g.gray(ctx, proxies, d, c, fmt.Sprintf("%s%v-", prefix, d), progress)
		stop()
		runs, gray = append(runs, r...), append(gray, down)
		if err != nil || ctx.Err() != nil {
			return runs, gray, err
		}
	}
	return runs, gray, nil
}

// gray runs the scenarios on l's gateway, whose node timeout is d, then the
// acquires with 3 of 5 paused.
func (l *lab) gray(ctx context.Context, proxies []*toxiproxy.Proxy, d time.Duration, c *config, prefix string, progress io.Writer) (runs []result, down grayResult, err error) {
	for i, s := range scenarios {
		fmt.Fprintf(progress, "%s at C=%d for %v\n", grayName(d, s.name), c.grayClients, c.duration)
		kill(l.servers[:s.paused], syscall.SIGSTOP)
		for _, p := range proxies[s.paused : s.paused+s.slow] {
			for _, stream := range []string{"upstream", "downstream"} { // a round trip of 2d
				toxic := fmt.Sprintf(`{"type":"latency","stream":%q,"attributes":{"latency":%d}}`, stream, d.Milliseconds())
				if _, err := p.Toxics.AddToxicJson(strings.NewReader(toxic)); err != nil {
					return runs, down, fmt.Errorf("latency on %s: %w", p.Upstream, err)
				}
			}
		}
		r, err := mode{group: "gray", name: gatewayMode, c: c.grayClients, noCost: true}.run(ctx, l, fmt.Sprintf("%s%d-", prefix, i), c.duration)
		heal(l.servers, proxies)
		if err == nil {
			err = l.ready(ctx) // the next scenario starts healthy
		}
		if err != nil {
			return runs, down, err
		}
		r.name = grayName(d, s.name)
		runs = append(runs, r)
	}
	down = grayResult{nodeTimeout: d, tries: 20}
	fmt.Fprintf(progress, "%s: %d acquires\n", grayName(d, "3 of 5 paused"), down.tries)
	kill(l.servers[:3], syscall.SIGSTOP)
	defer heal(l.servers, proxies)
	for i := range down.tries {
		start := time.Now()
		actx, cancel := context.WithTimeout(ctx, 10*d) // a 503 comes after about one node timeout
		_, err := l.client.Acquire(actx, fmt.Sprintf("%sdown-%d", prefix, i), client.AcquireOptions{TTL: 10 * time.Second})
		cancel()
		if errors.Is(err, client.ErrQuorumUnavailable) {
			down.to503 = append(down.to503, time.Since(start))
		} else {
			down.lastErr = fmt.Sprintf("acquire: %v", err) // nil: acquired
		}
	}
	slices.Sort(down.to503)
	return runs, down, ctx.Err()
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

// heal resumes every node, so that none is killed while stopped, and
// removes every toxic.
func heal(nodes []*redistest.Server, proxies []*toxiproxy.Proxy) {
	kill(nodes, syscall.SIGCONT)
	for _, p := range proxies {
		p.Toxics.ResetToxics(context.Background())
	}
}
