package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Node identity.
//
// Two URLs can reach one Redis server (127.0.0.1 and localhost, two DNS
// names, databases /0 and /1 of one server): counted as two nodes, that
// server would cast two votes, and a minority of servers could grant a
// lock. A node is therefore identified by its server's run_id (INFO
// server), read on every new connection before its first command and by
// every health check, not by its address. A node whose server another node
// reached first is an alias: it never votes again, and Status shows it down.
// CheckIdentities, called once every node was first checked, reports the
// aliases found, so that a gateway can refuse to start; a node unreachable
// then is checked when it first answers. A server that hides INFO server
// (the gateway's embedded dev nodes) has no identity and is not checked.

// identities maps each server (run_id) to the node that claims it: the
// first node to reach it.
type identities struct {
	mu     sync.Mutex
	owner  map[string]*node
	claims map[*node]string // the run_id each node claims
}

func newIdentities() *identities {
	return &identities{owner: map[string]*node{}, claims: map[*node]string{}}
}

// note records that node n reached the server runID ("" if unknown), and
// makes n an alias if another node claims that server.
func (ids *identities) note(n *node, runID string) {
	if ids == nil || runID == "" || n.aliasOf.Load() != nil {
		return
	}
	ids.mu.Lock()
	defer ids.mu.Unlock()
	if o, ok := ids.owner[runID]; ok && o != n {
		n.aliasOf.Store(o)
		n.opts.Logger.Error().Str("node", n.addr).Str("same_as", o.addr).
			Msg("redlock: two nodes reach one Redis server (same run_id): it would vote twice; " +
				"the later one never votes. Give each node once, by one URL")
		return
	}
	if old, ok := ids.claims[n]; ok && old != runID && ids.owner[old] == n {
		delete(ids.owner, old) // its server restarted: a new run_id
	}
	ids.owner[runID] = n
	ids.claims[n] = runID
}

// aliasErr describes n as an alias, nil if it is none.
func (n *node) aliasErr() error {
	o := n.aliasOf.Load()
	if o == nil {
		return nil
	}
	return fmt.Errorf("%w: node %d (%s) reaches the same server as node %d (%s): it never votes",
		ErrSameServer, n.idx, n.addr, o.idx, o.addr)
}

// CheckIdentities waits for every node's first health check (or until ctx
// ends) and returns ErrSameServer joined with one error per node found to
// reach the same Redis server as another, naming both by host:port; nil if
// none. A node not reached yet is checked when it first answers (and never
// votes if it then turns out to be an alias): it is logged.
func (c *Coordinator) CheckIdentities(ctx context.Context) error {
	var errs []error
	c.Status(ctx) // waits for the first checks
	for i, n := range c.nodes {
		if err := n.aliasErr(); err != nil {
			errs = append(errs, err)
			continue
		}
		c.ids.mu.Lock()
		_, known := c.ids.claims[n]
		c.ids.mu.Unlock()
		if h := n.health.Load(); !known && (h == nil || !h.up) {
			c.opts.Logger.Warn().Int("node", i).Str("addr", n.addr).
				Msg("redlock: node not reached at start: whether it is the same server as another node is checked when it first answers")
		}
	}
	return errors.Join(errs...)
}
