package redlock

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// fingerprint is how release messages name the releasing token without
// revealing it, and how nodes remember a release (ADR 0013): the first 16
// hex digits of its SHA-1. The scripts that remember or announce a release
// are given it (prelude.lua): they never hash a token themselves.
func fingerprint(token string) string {
	sum := sha1.Sum([]byte(token))
	return hex.EncodeToString(sum[:8])
}

// notify wakes a head waiter of key, unless the release (from) was its own:
// the one this release woke already (another node's announcement of it),
// else the first head (of a semaphore, the first without a permit to try).
// The key of a semaphore's permit i, <prefix>#i, wakes a head of the
// semaphore's queue (<prefix>#) and tells it i.
func (h *waitHub) notify(key, from string, node int) {
	permit := -1
	if i := strings.LastIndexByte(key, '#'); i >= 0 {
		permit, _ = strconv.Atoi(key[i+1:])
		key = key[:i+1]
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queues[key]
	if q == nil {
		return
	}
	heads := q.first()
	i := slices.IndexFunc(heads, func(w *waiter) bool { return w.wokenBy == from })
	if i < 0 {
		i = slices.IndexFunc(heads, func(w *waiter) bool { return w.own != from && (q.heads == 1 || w.freed.Load() == 0) })
	}
	if i < 0 || heads[i].own == from {
		return
	}
	w := heads[i]
	w.wokenBy = from
	if permit >= 0 {
		w.freed.Store(int64(permit) + 1)
	}
	select {
	case w.wake <- node:
	default:
	}
}

// wakeAll wakes every head: a subscription was re-made, messages are lost.
func (h *waitHub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, q := range h.queues {
		for _, w := range q.first() {
			select {
			case w.wake <- -1:
			default:
			}
		}
	}
}

// start subscribes to the release channel on every node, in the
// background. New calls it once.
func (h *waitHub) start(c *Coordinator) {
	for _, n := range c.nodes {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			ps := n.client.Subscribe(context.Background(), c.released)
			h.mu.Lock()
			if h.closed {
				h.mu.Unlock()
				_ = ps.Close()
				return
			}
			h.subs = append(h.subs, ps)
			h.mu.Unlock()
			subscribed := h.confirm(c, n, ps)
			for m := range ps.ChannelWithSubscriptions(redis.WithChannelSize(1024)) {
				switch m := m.(type) {
				case *redis.Message:
					if key, from, ok := strings.Cut(m.Payload, "|"); ok {
						h.notify(key, from, n.idx)
					}
				case *redis.Subscription:
					if m.Kind == "subscribe" {
						if subscribed++; subscribed > 1 {
							h.wakeAll()
						}
					}
				}
			}
		}()
	}
}

// confirm reads the first reply to n's subscription, within the node
// timeout, and returns 1 if it is the subscription's confirmation, else 0.
// A refusal (an ACL without SUBSCRIBE or the channel) is logged: go-redis
// would swallow it, and waiting acquires would be woken by no release.
func (h *waitHub) confirm(c *Coordinator, n *node, ps *redis.PubSub) int {
	m, err := ps.ReceiveTimeout(context.Background(), c.opts.NodeTimeout)
	if code := errCode(err); code != "" {
		c.opts.Logger.Warn().Str("node", n.addr).Str("error", n.describe(err)).Str("channel", c.released).
			Msg("redlock: the node refused the subscription to release announcements: a release wakes no waiting acquire, which tries again only when the holder's TTL ends or every poll interval; allow SUBSCRIBE on the channel (docs/safety.md)")
	}
	if s, ok := m.(*redis.Subscription); ok && s.Kind == "subscribe" {
		return 1
	}
	return 0
}

// close ends the subscriptions and waits for their goroutines.
func (h *waitHub) close() error {
	h.mu.Lock()
	h.closed = true
	subs := h.subs
	h.subs = nil
	h.mu.Unlock()
	var errs []error
	for _, ps := range subs {
		errs = append(errs, ps.Close())
	}
	h.wg.Wait()
	return errors.Join(errs...)
}
