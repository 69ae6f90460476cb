package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/client"
	"github.com/redlockd/redlockd/redlock"
	"github.com/redlockd/redlockd/server"
)

// Example takes a lock through a gateway, works under it and releases it.
// The gateway here runs in-process over embedded in-memory nodes to keep
// the example self-contained; point client.New at your redlockd instead.
func Example() {
	gatewayURL, stop := exampleGateway()
	defer stop()

	c, err := client.New(gatewayURL, client.Options{})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	lock, err := c.Acquire(ctx, "nightly-report", client.AcquireOptions{TTL: 30 * time.Second, Wait: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	// Work until lock.Until at the latest (or Extend before it), and pass
	// lock.Fence to the storage you write to.
	fmt.Println("fencing token given:", lock.Fence > 0, "safe for at most", lock.TTL)

	_, err = c.Acquire(ctx, "nightly-report", client.AcquireOptions{})
	var held *client.HeldError
	fmt.Println("second acquire held:", errors.As(err, &held) && held.Remaining > 0)

	if err := c.Release(ctx, "nightly-report", lock.Token); errors.Is(err, client.ErrNotOwner) {
		fmt.Println("lost the lock: the work may not have been exclusive")
	}
	info, err := c.Inspect(ctx, "nightly-report")
	if err != nil {
		panic(err) // ErrNotFound here means a wrong base URL, never a free lock
	}
	fmt.Println("free:", !info.Held)
	// Output:
	// fencing token given: true safe for at most 30s
	// second acquire held: true
	// free: true
}

// exampleGateway runs a gateway over three embedded nodes.
func exampleGateway() (url string, stop func()) {
	var nodes []*redis.Options
	var mrs []*miniredis.Miniredis
	for range 3 {
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			panic(err)
		}
		mrs = append(mrs, m)
		nodes = append(nodes, &redis.Options{Addr: m.Addr()})
	}
	coord, err := redlock.New(nodes, redlock.Options{Quarantine: redlock.QuarantineOff, NodeTimeout: testNodeTimeout})
	if err != nil {
		panic(err)
	}
	hs := httptest.NewServer(server.New(server.Config{Locker: coord}).Handler())
	return hs.URL, func() {
		hs.Close()
		_ = coord.Close()
		for _, m := range mrs {
			m.Close()
		}
	}
}
