package client_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redlockd/redlockd/client"
)

// Example takes a lock through a gateway, works under it and releases it.
// The gateway here is started by the tests over local redis-servers;
// point client.New at your redlockd instead.
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

// exampleGateway runs a gateway over three redis-servers, stopped after
// the tests.
func exampleGateway() (url string, stop func()) {
	return startGateway(exampleCleanup, 3, nil).URL, func() {}
}
