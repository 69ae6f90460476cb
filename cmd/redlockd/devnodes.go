package main

import (
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// devNodeCount is the number of embedded nodes started in dev mode: five, as
// in the docker-compose cluster, so that quorum (3) behaves as in production.
const devNodeCount = 5

// devNodes are in-memory Redis-compatible servers (miniredis) run inside the
// process when no --redis is given. Nothing they hold is durable, and they
// share the process's fate, so they give no fault tolerance.
type devNodes []*miniredis.Miniredis

// startDevNodes starts n miniredis servers on 127.0.0.1 with ephemeral ports.
// With ClockTTL every command first advances the TTLs by the time elapsed
// since the previous one, so PX TTLs expire in real time (lazily, which no
// client can tell apart: miniredis has no keyspace notifications).
func startDevNodes(n int) (*devNodes, error) {
	d := &devNodes{}
	for i := range n {
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true)
		if err := m.StartAddr("127.0.0.1:0"); err != nil {
			d.Close()
			return nil, fmt.Errorf("dev mode: start embedded node %d: %w", i+1, err)
		}
		*d = append(*d, m)
	}
	return d, nil
}

// Options returns one go-redis Options per node, for redlock.New.
func (d *devNodes) Options() []*redis.Options {
	opts := make([]*redis.Options, len(*d))
	for i, a := range d.Addrs() {
		opts[i] = &redis.Options{Addr: a}
	}
	return opts
}

// Addrs returns each node's host:port.
func (d *devNodes) Addrs() []string {
	addrs := make([]string, len(*d))
	for i, m := range *d {
		addrs[i] = m.Addr()
	}
	return addrs
}

// Close stops every node; their data is gone. It is safe to call on a nil
// *devNodes and more than once.
func (d *devNodes) Close() {
	if d == nil {
		return
	}
	for _, m := range *d {
		m.Close()
	}
	*d = nil
}
