package redlock

import (
	"context"
	"strings"
	"sync"
	"time"
)

// The key census: how many keys each namespace has, for operators to alert
// on. No key lives forever, but a tenant that touches many names keeps a
// fence counter per name for FenceIdleTTL (see Options.FenceIdleTTL), and
// a lock's record for max TTL after its release. Every CensusInterval the
// coordinator counts the keys under its prefix on one node, the nodes taking
// turns: SCAN MATCH <prefix>* COUNT scanCount, one call after another, each
// bounded by the node timeout; a census that fails is dropped, and the next
// node counts next time. A census that completes goes to the observers too.

// Census is the last complete key count.
type Census struct {
	Node string    // host:port of the node counted
	At   time.Time // when the count ended; zero before the first
	// Keys counts the keys of each namespace ("" is the default one) on
	// that node.
	Keys map[string]int
}

// census holds the last Census and stops the census loop.
type census struct {
	mu   sync.Mutex
	last Census
	stop context.CancelFunc
	done chan struct{}
}

// Census returns the last complete key count (see census.go).
func (c *Coordinator) Census() Census {
	c.census.mu.Lock()
	defer c.census.mu.Unlock()
	return c.census.last
}

// startCensus counts keys at once, then every CensusInterval, until Close.
func (c *Coordinator) startCensus() {
	ctx, cancel := context.WithCancel(context.Background())
	c.census.stop, c.census.done = cancel, make(chan struct{})
	go func() {
		defer close(c.census.done)
		t := time.NewTimer(0)
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			c.count(ctx, c.nodes[i%len(c.nodes)])
			t.Reset(jitter(c.opts.CensusInterval))
		}
	}()
}

// stopCensus stops the census loop and waits for it.
func (c *Coordinator) stopCensus() {
	if c.census.stop != nil {
		c.census.stop()
		<-c.census.done
	}
}

// count counts n's keys by namespace, and keeps the count if it completes.
func (c *Coordinator) count(ctx context.Context, n *node) {
	keys := map[string]int{}
	var cursor uint64
	for {
		sctx, cancel := context.WithTimeout(ctx, c.opts.NodeTimeout)
		batch, next, err := n.client.Scan(sctx, cursor, c.opts.KeyPrefix+"*", scanCount).Result()
		cancel()
		if err != nil {
			return
		}
		for _, k := range batch {
			if ns, ok := c.namespaceOf(k); ok {
				keys[ns]++
			}
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	last := Census{Node: n.addr, At: time.Now(), Keys: keys}
	c.census.mu.Lock()
	c.census.last = last
	c.census.mu.Unlock()
	c.obs.Census(last)
}

// namespaceOf is the namespace of a key <prefix><kind>:<namespace>/<name>…
// (see keys), false for a key of no namespace (the health key).
func (c *Coordinator) namespaceOf(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, c.opts.KeyPrefix)
	if !ok {
		return "", false
	}
	_, rest, ok = strings.Cut(rest, ":")
	if !ok {
		return "", false
	}
	ns, _, ok := strings.Cut(rest, "/")
	return ns, ok
}
