// Hand-over of a released permit to a waiting acquire (docs/semaphores.md).

package redlock

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// cancelOnArg is a go-redis hook that calls cancel before sending a command
// (alone or in a pipeline) that has arg among its arguments, once armed.
type cancelOnArg struct {
	arg    string
	cancel context.CancelFunc
	armed  *atomic.Bool
}

func (h cancelOnArg) check(cmds ...redis.Cmder) {
	for _, cmd := range cmds {
		if h.armed.Load() && slices.Contains(cmd.Args(), any(h.arg)) {
			h.cancel()
		}
	}
}

func (h cancelOnArg) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h cancelOnArg) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.check(cmd); return next(ctx, cmd) }
}

func (h cancelOnArg) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.check(cmds...); return next(ctx, cmds) }
}

// TestHandOverCallerGone: a permit handed over by a release to a waiting
// acquire whose caller has just gone away (its context cancelled while the
// hand-over ran) is released again, not left held for its TTL by nobody,
// and the acquire fails with the context's error.
func TestHandOverCallerGone(t *testing.T) {
	waiterCtx, leave := context.WithCancel(context.Background())
	defer leave()
	hook := cancelOnArg{arg: "gone-waiter", cancel: leave, armed: new(atomic.Bool)}
	cl := newCluster(t, 3, Options{PollInterval: time.Minute, ClientHook: func(c *redis.Client) { c.AddHook(hook) }})
	c, ctx := cl.c, t.Context()
	held, err := c.AcquirePermit(ctx, "s", permitOpts(1, AcquireOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := c.AcquirePermit(waiterCtx, "s", permitOpts(1, AcquireOptions{Wait: 20 * time.Second, TTL: 20 * time.Second, Owner: "gone-waiter"}))
		errc <- err
	}()
	waitPaused(t, c, "s")
	hook.armed.Store(true) // the hand-over's script names the waiter's owner
	if err := c.ReleasePermit(ctx, "", "s", held.Token); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("the acquire of a caller gone during its hand-over: %v, want context.Canceled", err)
	}
	eventually(t, patience, "the permit handed to a caller gone freed", func() bool {
		info, err := c.InspectSemaphore(ctx, "", "s")
		return err == nil && len(info.Permits) == 0
	})
}

// waitPaused waits until one acquire waits for a permit of semaphore name, idle
// between its rounds.
func waitPaused(t *testing.T, c *Coordinator, name string) {
	t.Helper()
	eventually(t, patience, "an acquire paused between its rounds", func() bool {
		c.hub.mu.Lock()
		defer c.hub.mu.Unlock()
		q := c.hub.queues[c.semaphoreKeysOf("", name).queue()]
		return q != nil && len(q.ws) == 1 && q.ws[0].paused
	})
}
