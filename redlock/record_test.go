package redlock

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// record is a lock key's record as the scripts write it (see rec_read in
// prelude.lua), for the tests that look at a node's keys.
type record struct {
	holder, nf, fence, flags, rel, owner string
}

// recordOf parses a lock key's value (ok false when it is no record).
func recordOf(v string) (r record, ok bool) {
	f := strings.SplitN(v, " ", 6)
	if len(f) != 6 {
		return record{holder: v, nf: "-", fence: "-", flags: "-", rel: "-"}, v != ""
	}
	return record{f[0], f[1], f[2], f[3], f[4], f[5]}, true
}

// readRecord is key's record on c: holder "" when there is no key.
func readRecord(t *testing.T, c *redis.Client, key string) record {
	t.Helper()
	v, err := c.Get(context.Background(), key).Result()
	if err == redis.Nil {
		return record{}
	}
	if err != nil {
		t.Fatal(err)
	}
	r, _ := recordOf(v)
	return r
}

// holderAt is the writer that key's record names on c, or "" (none, a
// tombstone, readers).
func holderAt(t *testing.T, c *redis.Client, key string) string {
	t.Helper()
	if h := readRecord(t, c, key).holder; h != "~" && h != "^" {
		return h
	}
	return ""
}

// TestReleasesRemembered: a lock's record remembers its last 8 releases,
// by their tokens' fingerprints and never the tokens, through later
// holders: a retried release of one of them answers 2 (204), of an older
// one 0; the tombstone lives max TTL, and the uncontended cycle touches the
// lock key alone besides the fence counter.
func TestReleasesRemembered(t *testing.T) {
	cl := newCluster(t, 3, Options{MaxTTL: 6 * time.Second, DefaultTTL: 3 * time.Second})
	ctx := t.Context()
	res := uniq(t)
	var toks []string
	for range 10 {
		l, err := cl.c.Acquire(ctx, res, AcquireOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.c.Release(ctx, "", res, l.Token); err != nil {
			t.Fatal(err)
		}
		toks = append(toks, l.Token)
	}
	held, err := cl.c.Acquire(ctx, res, AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, tok := range toks {
		err := cl.c.Release(ctx, "", res, tok)
		if remembered := i >= 2; remembered != (err == nil) {
			t.Fatalf("retried release of the %d-th of 10 releases err = %v, want remembered %v", i+1, err, remembered)
		}
	}
	cl.settle()
	key := cl.c.lockKeysOf("", res).Lock
	for i, s := range cl.servers {
		r := readRecord(t, s.Client(), key)
		var want []string
		for _, tok := range slices.Backward(toks[2:]) {
			want = append(want, fingerprint(tok))
		}
		if r.holder != held.Token || r.rel != strings.Join(want, ",") {
			t.Fatalf("node %d: record %+v, want %s holding with the fingerprints of the last 8 releases, newest first: %s", i, r, held.Token, strings.Join(want, ","))
		}
		keys, _ := s.Client().Keys(ctx, "redlockd:*"+res+"*").Result()
		if len(keys) != 2 {
			t.Fatalf("node %d: keys %v, want the lock and its fence counter", i, keys)
		}
	}
	if err := cl.c.Release(ctx, "", res, held.Token); err != nil {
		t.Fatal(err)
	}
	cl.settle()
	for i, s := range cl.servers {
		if ttl := s.Client().PTTL(ctx, key).Val(); ttl <= 3*time.Second || ttl > 6*time.Second {
			t.Fatalf("node %d: the tombstone's TTL %v, want max TTL", i, ttl)
		}
		v := s.Client().Get(ctx, key).Val()
		for _, tok := range append(toks, held.Token) {
			if strings.Contains(v, tok) {
				t.Fatalf("node %d: the tombstone %q holds the released token %s", i, v, tok)
			}
		}
	}
}

// TestUncontendedCycleCommands: an uncontended acquire and release of a
// lock run 5 commands on each node inside their scripts (GET, INCR and SET;
// GET and SET), and one more the first time (the fence counter made, with
// its TTL): the record is the only key they touch besides the counter. A
// lone reader's run 16 (read_acquire.lua's 10, release.lua's 6: see each
// script's header), the first time too, as a reader makes no counter. A lock
// on two resources runs a lock's commands on each and a TIME: its acquire
// reads each record once (multi_acquire.lua).
func TestUncontendedCycleCommands(t *testing.T) {
	cl := newCluster(t, 3, Options{HealthInterval: time.Hour, PollInterval: time.Minute})
	for _, n := range cl.c.nodes {
		<-n.firstDone // no health check runs while the commands are counted
	}
	ctx := t.Context()
	lock := func(o AcquireOptions) func(res string) error {
		return func(res string) error {
			l, err := cl.c.Acquire(ctx, res, o)
			if err == nil {
				err = cl.c.Release(ctx, "", res, l.Token)
			}
			return err
		}
	}
	for _, m := range []struct {
		kind        string
		cycle       func(res string) error
		first, next int64
	}{
		{"lock", lock(AcquireOptions{}), 6, 5},
		{"reader", lock(AcquireOptions{Mode: ModeRead}), 16, 16},
		{"two resources", func(res string) error {
			rs := []string{res + "-a", res + "-b"}
			l, err := cl.c.AcquireMulti(ctx, rs, AcquireOptions{})
			if err == nil {
				err = cl.c.ReleaseMulti(ctx, "", rs, l.Token)
			}
			return err
		}, 13, 11},
	} {
		res := uniq(t)
		for _, c := range []struct {
			what   string
			cycles int
			want   int64
		}{{"the first cycle", 1, m.first}, {"a cycle", 10, m.next}} {
			before := cl.scriptCommands(t)
			for range c.cycles {
				if err := m.cycle(res); err != nil {
					t.Fatal(err)
				}
			}
			if got, want := cl.scriptCommands(t)-before, c.want*int64(len(cl.servers)*c.cycles); got != want {
				t.Errorf("%s, %s: %d commands on %d nodes, want %d per node", m.kind, c.what, got, len(cl.servers), c.want)
			}
		}
	}
}
