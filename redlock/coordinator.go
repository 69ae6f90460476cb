package redlock

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Coordinator runs the Redlock algorithm over N independent Redis masters.
// It is safe for concurrent use; it holds no per-lock state, so any number
// of coordinators (gateway replicas) may share the same nodes.
type Coordinator struct {
	opts     Options
	nodes    []*node
	quorum   int
	hub      waitHub  // waiting acquires
	census   census   // the last key count (see census.go)
	stats    counters // the first of obs
	obs      Observer // stats, then Options.Observer
	idxs     []int    // every node's index: read-only
	released string   // the channel of release announcements
	mark     string   // its waiters' mark on a lock's record (see rec_mark in prelude.lua)
	nodeSet  string   // names the nodes in their order in list cursors
	ids      *identities
	// bg counts the work left to the background: stragglers of rounds
	// (see batch.go), each bounded by about the node timeout. Close waits
	// for it.
	bg sync.WaitGroup
}

// New returns a Coordinator over one client per node, made from the given
// go-redis options (their timeouts and retries are overridden so that each
// command is bounded by Options.NodeTimeout and never retried). It validates
// opts once. May return ErrInvalid.
func New(nodes []*redis.Options, opts Options) (*Coordinator, error) {
	if len(nodes) == 0 {
		return nil, invalid("no nodes")
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	c := &Coordinator{opts: opts, quorum: len(nodes)/2 + 1, released: opts.KeyPrefix + "released",
		mark: "w:" + NewToken()[:8], ids: newIdentities()}
	c.obs = Observers(&c.stats, opts.Observer)
	set := fnv.New64a()
	for i, o := range nodes {
		if o == nil {
			return nil, invalid("node %d has no options", i)
		}
		n, err := newNode(i, o, opts, c.ids)
		if err != nil {
			for _, n := range c.nodes {
				n.close()
			}
			return nil, err
		}
		c.nodes = append(c.nodes, n)
		c.idxs = append(c.idxs, i)
		fmt.Fprintf(set, "%s/%d,", o.Addr, o.DB)
	}
	c.nodeSet = strconv.FormatUint(set.Sum64(), 36)
	c.hub.start(c) // release announcements wake waiting acquires
	c.startCensus()
	for _, n := range c.nodes {
		n.mark = "n=" + strconv.Itoa(len(c.nodes))
		n.startHealth()
	}
	if len(nodes) == 1 {
		opts.Logger.Warn().Msg("redlock: a single node gives no fault tolerance: if it fails or restarts, locks are lost")
	}
	return c, nil
}

// Nodes is N, the number of nodes.
func (c *Coordinator) Nodes() int { return len(c.nodes) }

// Quorum is the number of nodes needed: N/2 + 1.
func (c *Coordinator) Quorum() int { return c.quorum }

// Options returns the effective options, defaults filled in.
func (c *Coordinator) Options() Options { return c.opts }

// Close closes every node's client.
func (c *Coordinator) Close() error {
	c.bg.Wait()
	c.stopCensus()
	errs := []error{c.hub.close()}
	for _, n := range c.nodes {
		n.stopHealth()
		errs = append(errs, n.close())
	}
	return errors.Join(errs...)
}

// checkName checks a namespace, a resource and the tokens given.
func (c *Coordinator) checkName(namespace, resource string, tokens ...string) error {
	if namespace != "" && !ValidName(namespace) {
		return invalid("namespace must be 1-%d characters of [A-Za-z0-9._:-], other than . and ..", MaxNameLen)
	}
	if !ValidName(resource) {
		return invalid("resource must be 1-%d characters of [A-Za-z0-9._:-], other than . and ..", MaxNameLen)
	}
	for _, t := range tokens {
		if !ValidToken(t) {
			return invalid(errToken)
		}
	}
	return nil
}

const errToken = "token must be 22-128 characters of [A-Za-z0-9_-]"

func (c *Coordinator) ttlOrDefault(ttl time.Duration) (time.Duration, error) {
	if ttl == 0 {
		return c.opts.DefaultTTL, nil
	}
	if ttl < MinTTL || ttl > c.opts.MaxTTL {
		return 0, invalid("ttl must be within [%d, %d] ms", MinTTL.Milliseconds(), c.opts.MaxTTL.Milliseconds())
	}
	return ttl, nil
}

// Warm opens every node's connections and loads the scripts, in parallel,
// each node bounded by timeout, so that the first requests do not pay for
// dialling or a NOSCRIPT (and a restarted node's quarantine is known before
// them). Nodes that do not answer are tried again on every request.
func (c *Coordinator) Warm(ctx context.Context, timeout time.Duration) {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			if n.client.Ping(ctx).Err() != nil {
				return
			}
			for _, s := range scripts {
				_ = s.Load(ctx, n.client).Err()
			}
			if n.pipe != nil {
				_ = n.pipe.Ping(ctx).Err()
			}
		})
	}
	wg.Wait()
}
