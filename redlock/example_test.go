package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlockd/redlockd/redlock"
)

// Example takes, extends and releases a lock over three nodes. Embedded
// in-memory nodes keep the example self-contained; use independent Redis
// masters for real.
func Example() {
	var nodes []*redis.Options
	for range 3 {
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			panic(err)
		}
		defer m.Close()
		nodes = append(nodes, &redis.Options{Addr: m.Addr()})
	}
	// A generous node timeout: the example also runs on loaded CI machines.
	c, err := redlock.New(nodes, redlock.Options{Quarantine: redlock.QuarantineOff, NodeTimeout: time.Second})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx := context.Background()

	lock, err := c.Acquire(ctx, "nightly-report", redlock.AcquireOptions{TTL: 10 * time.Second, Owner: "host1"})
	if err != nil {
		panic(err)
	}
	fmt.Println("acquired on a quorum:", lock.Locked >= lock.Quorum, "with a fencing token:", lock.Fence > 0)

	_, err = c.Acquire(ctx, "nightly-report", redlock.AcquireOptions{})
	fmt.Println("second acquire held:", errors.Is(err, redlock.ErrLockHeld))

	lock, err = c.Extend(ctx, "", "nightly-report", lock.Token, 20*time.Second)
	fmt.Println("extended:", err == nil, lock.TTL)

	err = c.Release(ctx, "", "nightly-report", lock.Token)
	fmt.Println("released:", err == nil)

	// A retried release (its first answer lost) succeeds again; a token
	// that never held the lock is told so.
	err = c.Release(ctx, "", "nightly-report", lock.Token)
	fmt.Println("released again:", err == nil)

	err = c.Release(ctx, "", "nightly-report", redlock.NewToken())
	fmt.Println("released by a stranger:", errors.Is(err, redlock.ErrLockExpired))
	// Output:
	// acquired on a quorum: true with a fencing token: true
	// second acquire held: true
	// extended: true 20s
	// released: true
	// released again: true
	// released by a stranger: true
}
