package main

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startTestDevNodes starts n dev nodes, closed at the end of the test.
func startTestDevNodes(t *testing.T, n int) *devNodes {
	t.Helper()
	d, err := startDevNodes(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// devClient returns a go-redis client (default options: RESP3, HELLO) for
// node i, closed at the end of the test.
func devClient(t *testing.T, d *devNodes, i int) *redis.Client {
	t.Helper()
	c := redis.NewClient(d.Options()[i])
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestDevNodesStart(t *testing.T) {
	d := startTestDevNodes(t, devNodeCount)
	if exp, got := devNodeCount, len(d.Addrs()); exp != got {
		t.Fatalf("nodes: exp %d, got %d", exp, got)
	}
	seen := map[string]bool{}
	for i, addr := range d.Addrs() {
		if seen[addr] {
			t.Fatalf("address %s used twice", addr)
		}
		seen[addr] = true
		if err := devClient(t, d, i).Ping(t.Context()).Err(); err != nil {
			t.Fatalf("node %d (%s): ping: %v", i, addr, err)
		}
	}
	d.Close()
	d.Close() // idempotent
}

// TestDevNodesExpireInRealTime proves that PX TTLs run on the real clock and
// not only on miniredis's FastForward.
func TestDevNodesExpireInRealTime(t *testing.T) {
	d := startTestDevNodes(t, 1)
	c := devClient(t, d, 0)
	ctx := t.Context()

	start := time.Now()
	ok, err := c.SetNX(ctx, "k", "v", 200*time.Millisecond).Result()
	if err != nil || !ok {
		t.Fatalf("SET NX PX 200: %v, %v", ok, err)
	}
	// The key expires within 200ms of set: the node set it before it
	// answered (start is before it did, set after).
	set := time.Now()
	time.Sleep(100 * time.Millisecond)
	pttl, err := c.PTTL(ctx, "k").Result()
	if err != nil {
		t.Fatal(err)
	}
	// The TTL went down by the time elapsed (unless this machine is so
	// slow that the 100ms sleep took 180ms).
	if elapsed := time.Since(start); elapsed < 180*time.Millisecond {
		if limit := 110 * time.Millisecond; pttl <= 0 || pttl > limit {
			t.Fatalf("PTTL after %v: %v, want in (0, %v]", elapsed, pttl, limit)
		}
		if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
			t.Fatalf("GET before expiry: %q, %v", got, err)
		}
	}

	time.Sleep(300*time.Millisecond - time.Since(set)) // 300ms since SET answered
	if _, err := c.Get(ctx, "k").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after 300ms: want redis.Nil, got %v", err)
	}
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS after 300ms: %d, %v", n, err)
	}
	// The key is free again.
	if ok, err := c.SetNX(ctx, "k", "w", time.Second).Result(); err != nil || !ok {
		t.Fatalf("SET NX after expiry: %v, %v", ok, err)
	}
}

// probeScript exercises, in one Lua script, every command the coordinator's
// scripts use, and checks that redis.call returns false for a nil reply.
// -- KEYS: [lock, fence, meta]; ARGV: [token, ttl_ms]
const probeScript = `
local lock, fence, meta = KEYS[1], KEYS[2], KEYS[3]
local token, ttl = ARGV[1], ARGV[2]
local out = {}
-- GET of a missing key is false, not nil.
out[#out+1] = tostring(redis.call('GET', lock) == false)
-- SET NX PX succeeds once, then returns false.
out[#out+1] = tostring(redis.call('SET', lock, token, 'NX', 'PX', ttl) ~= false)
out[#out+1] = tostring(redis.call('SET', lock, 'other', 'NX', 'PX', ttl) == false)
-- compare: GET returns the token.
out[#out+1] = tostring(redis.call('GET', lock) == token)
-- PEXPIRE then PTTL.
out[#out+1] = tostring(redis.call('PEXPIRE', lock, ttl * 2))
local pttl = redis.call('PTTL', lock)
out[#out+1] = tostring(pttl > tonumber(ttl) and pttl <= tonumber(ttl) * 2)
-- INCR for fences.
redis.call('INCR', fence)
out[#out+1] = tostring(redis.call('INCR', fence))
-- HSET/HGET/HGETALL; HGET of a missing field is false.
redis.call('HSET', meta, 'owner', 'me', 'fence', 2)
out[#out+1] = redis.call('HGET', meta, 'owner')
out[#out+1] = tostring(redis.call('HGET', meta, 'missing') == false)
out[#out+1] = tostring(#redis.call('HGETALL', meta))
-- compare-and-delete.
out[#out+1] = tostring(redis.call('DEL', lock, meta))
out[#out+1] = tostring(redis.call('GET', lock) == false)
return out
`

// TestDevNodesLua checks that miniredis supports what the coordinator uses:
// SCRIPT LOAD + EVALSHA (and go-redis's EVALSHA-with-NOSCRIPT-fallback), Lua
// calling GET, SET NX PX, PEXPIRE, PTTL, DEL, INCR, HSET/HGET/HGETALL, nil as
// false, integer replies, and the false => redis.Nil mapping on the way out.
func TestDevNodesLua(t *testing.T) {
	d := startTestDevNodes(t, 1)
	c := devClient(t, d, 0)
	ctx := t.Context()
	keys := []string{"redlockd:ns:res", "redlockd:ns:res:fence", "redlockd:ns:res:meta"}
	want := []any{"true", "true", "true", "true", "1", "true", "2", "me", "true", "4", "2", "true"}

	check := func(name string, got any, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		list, ok := got.([]any)
		if !ok || len(list) != len(want) {
			t.Fatalf("%s: got %#v, want %v", name, got, want)
		}
		for i := range want {
			if list[i] != want[i] {
				t.Fatalf("%s: item %d: got %#v, want %#v (all: %v)", name, i, list[i], want[i], list)
			}
		}
	}

	// go-redis Script.Run: EVALSHA, NOSCRIPT, then EVAL.
	s := redis.NewScript(probeScript)
	got, err := s.Run(ctx, c, keys, "tok", 1000).Result()
	check("Script.Run", got, err)

	// Explicit SCRIPT LOAD / EXISTS / EVALSHA.
	sha, err := c.ScriptLoad(ctx, probeScript).Result()
	if err != nil {
		t.Fatalf("SCRIPT LOAD: %v", err)
	}
	if sha != s.Hash() {
		t.Fatalf("SCRIPT LOAD sha %s, go-redis hash %s", sha, s.Hash())
	}
	if ex, err := c.ScriptExists(ctx, sha).Result(); err != nil || len(ex) != 1 || !ex[0] {
		t.Fatalf("SCRIPT EXISTS: %v, %v", ex, err)
	}
	c.Del(ctx, keys...)
	got, err = c.EvalSha(ctx, sha, keys, "tok", 1000).Result()
	check("EVALSHA", got, err)

	// A script returning false reaches go-redis as redis.Nil.
	nilScript := redis.NewScript(`return redis.call('GET', KEYS[1])`)
	if _, err := nilScript.Run(ctx, c, []string{"missing"}).Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("script returning false: want redis.Nil, got %v", err)
	}
	// Unknown SHA gives NOSCRIPT.
	if err := c.EvalSha(ctx, "0123456789012345678901234567890123456789", nil).Err(); err == nil || !redis.HasErrorPrefix(err, "NOSCRIPT") {
		t.Fatalf("EVALSHA unknown: want NOSCRIPT, got %v", err)
	}
}

// TestDevNodesPubSub checks PUBLISH/SUBSCRIBE, which the coordinator may use
// to wake waiters.
func TestDevNodesPubSub(t *testing.T) {
	d := startTestDevNodes(t, 1)
	c := devClient(t, d, 0)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()

	sub := c.Subscribe(ctx, "redlockd:released")
	defer func() { _ = sub.Close() }()
	if _, err := sub.Receive(ctx); err != nil { // subscription confirmation
		t.Fatal(err)
	}
	if n, err := c.Publish(ctx, "redlockd:released", "res").Result(); err != nil || n != 1 {
		t.Fatalf("PUBLISH: %d receivers, %v", n, err)
	}
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Payload != "res" {
		t.Fatalf("payload %q", msg.Payload)
	}
}

// TestDevNodesServerCommands: what the coordinator needs of a dev node
// beyond the commands of TestDevNodesLua: TIME, in Lua too (the scripts
// read the node's clock), answers the real time; and INFO server is refused
// with an error reply, which a coordinator with quarantine off takes as a
// node without identity (see checkServer in redlock/node.go).
func TestDevNodesServerCommands(t *testing.T) {
	d := startTestDevNodes(t, 1)
	c := devClient(t, d, 0)
	ctx := t.Context()
	before := time.Now().Truncate(time.Second)
	now, err := c.Time(ctx).Result()
	if err != nil || now.Before(before) || now.After(time.Now().Add(time.Second)) {
		t.Fatalf("TIME: %v, %v; want a time from %v on", now, err, before)
	}
	secs, err := redis.NewScript(`return redis.call('TIME')[1]`).Run(ctx, c, nil).Text()
	if err != nil || secs < strconv.FormatInt(before.Unix(), 10) {
		t.Fatalf("TIME in Lua: %q, %v; want seconds from %d on", secs, err, before.Unix())
	}
	var reply redis.Error
	if err := c.Info(ctx, "server").Err(); !errors.As(err, &reply) {
		t.Fatalf("INFO server: %v, want an error reply", err)
	}
}
