package redlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

type acqReply struct {
	ok        bool
	existing  bool // the token held it already
	committed bool // existing, and its fence is the chosen one (not the node's tentative one)
	fence     int64
	counter   int64 // existing: the node's fence counter
	pttl      int64 // the other holder's remaining TTL, when !ok
	// A semaphore's (see permitKind.parser): the permit, the permits free on
	// the node, the limit of the permits held there when it differs, and
	// whether a grant left every permit held there.
	permit   int
	free     []int
	mismatch int
	full     bool
}

func parseAcquire(cmd *redis.Cmd) (acqReply, error) {
	v, err := cmd.Slice()
	if err != nil {
		return acqReply{}, err
	}
	return acqReplyOf(v)
}

// acqReplyOf reads acquire.lua's reply.
func acqReplyOf(v []any) (acqReply, error) {
	switch {
	case len(v) == 4 && toInt(v[0]) == 1:
		return acqReply{ok: true, fence: toInt(v[1])}, nil
	case len(v) == 5 && toInt(v[0]) == 1:
		return acqReply{ok: true, fence: toInt(v[1]), existing: true, committed: toInt(v[3]) == 1, counter: toInt(v[4])}, nil
	case len(v) == 2 && toInt(v[0]) == 0:
		return acqReply{pttl: toInt(v[1])}, nil
	}
	return acqReply{}, fmt.Errorf("unexpected acquire reply %v", v)
}

// parseMulti parses multi_acquire.lua's reply on n resources: a refusal is
// every resource's.
func parseMulti(n int) func(*redis.Cmd) ([]acqReply, error) {
	return func(cmd *redis.Cmd) ([]acqReply, error) {
		v, err := cmd.Slice()
		if err != nil {
			return nil, err
		}
		rs := make([]acqReply, n)
		switch {
		case len(v) == 2 && toInt(v[0]) == 0:
			for i := range rs {
				rs[i].pttl = toInt(v[1])
			}
			return rs, nil
		case len(v) == n+1 && toInt(v[0]) == 1:
			for i := range rs {
				r, _ := v[i+1].([]any)
				if rs[i], err = acqReplyOf(r); err != nil {
					return nil, err
				}
			}
			return rs, nil
		}
		return nil, fmt.Errorf("unexpected multi acquire reply %v", v)
	}
}

// commitReply is a node's answer to commit.lua, and a semaphore's permit.
type commitReply struct {
	permit int
	// state: 1 the fence is recorded as the token's beside its lock, 0 the
	// token does not hold the lock here, -1 it does, but this node gave the
	// fence to another token.
	state   int64
	counter int64 // the node's fence counter after the commit
}

// commitReplyOf reads commit.lua's reply.
func commitReplyOf(v []any) (commitReply, error) {
	if len(v) != 2 {
		return commitReply{}, fmt.Errorf("unexpected commit reply %v", v)
	}
	return commitReply{state: toInt(v[0]), counter: toInt(v[1])}, nil
}

type extReply struct {
	state     int64 // 1 extended, 0 absent, -1 other token
	fence     int64
	committed bool // fence is the chosen one, not the node's tentative one
	owner     string
	reader    bool // the token is a reader
	// A semaphore's: the permit the token holds on the node, and the limit.
	permit, limit int
}

func parseExtend(cmd *redis.Cmd) (extReply, error) {
	v, err := cmd.Slice()
	if err != nil || len(v) == 0 {
		return extReply{}, errors.Join(err, errors.New("empty extend reply"))
	}
	r := extReply{state: toInt(v[0])}
	if r.state == 1 && len(v) >= 4 {
		r.fence, r.committed, r.owner = recorded(v[1:])
		r.reader = len(v) == 5
	}
	return r, nil
}

// relReply is a node's answer to release.lua (v), and a semaphore's permit.
type relReply struct {
	permit int
	v      int64
}

// holder is a token's record on a node, as inspect.lua and
// permit_inspect.lua read it.
type holder struct {
	permit      int // permit_inspect.lua's: the permit the token holds
	token       string
	pttl, fence int64
	committed   bool
	owner       string
}

// parseInspect parses inspect.lua's reply: the writer (token "" if none),
// then the readers.
func parseInspect(cmd *redis.Cmd) ([]holder, error) {
	v, err := cmd.Slice()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var hs []holder
	for i := 0; i+5 <= len(v); i += 5 {
		h := holder{pttl: toInt(v[i+1])}
		h.token, _ = v[i].(string)
		h.fence, h.committed, h.owner = recorded(v[i+2 : i+5])
		hs = append(hs, h)
	}
	return hs, nil
}

// recorded reads the 'fence', 'nf' and 'owner' fields of a lock's record:
// its fence, and whether it is the chosen one.
func recorded(v []any) (fence int64, committed bool, owner string) {
	owner, _ = v[2].(string)
	if f := toInt(v[0]); f > 0 {
		return f, true, owner
	}
	return toInt(v[1]), false, owner
}

func toInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}

// permitReply splits a permit script's reply, {permit, reply, extra} (see
// permit_find.lua), into the permit, a command holding the lock script's
// reply, and extra.
func permitReply(cmd *redis.Cmd) (permit int, body *redis.Cmd, extra any, err error) {
	v, err := cmd.Slice()
	if err != nil {
		return -1, nil, nil, err
	}
	if len(v) != 3 && len(v) != 4 { // permit_acquire.lua's grant adds full
		return -1, nil, nil, fmt.Errorf("unexpected permit reply %v", v)
	}
	body = redis.NewCmd(context.Background())
	body.SetVal(v[1])
	return int(toInt(v[0])), body, v[2], nil
}

// onPermit is the decoder of a permit script's reply (see permitReply)
// that reads the lock script's reply with parse and adds the permit and
// the extra with set.
func onPermit[T any](parse func(*redis.Cmd) (T, error), set func(r *T, permit int, extra any)) func(*redis.Cmd) (T, error) {
	return func(cmd *redis.Cmd) (T, error) {
		permit, body, extra, err := permitReply(cmd)
		if err != nil {
			var zero T
			return zero, err
		}
		r, err := parse(body)
		set(&r, permit, extra)
		return r, err
	}
}

// handOverReply is a node's answer to permit_handover.lua: the permit, the
// release's answer (as release.lua's) and the acquire's (as acquire.lua's).
type handOverReply struct {
	permit   int
	released int64
	acq      acqReply
}

func parseHandOver(cmd *redis.Cmd) (handOverReply, error) {
	permit, released, acq, err := permitReply(cmd)
	if err != nil {
		return handOverReply{}, err
	}
	r := handOverReply{permit: permit}
	if r.released, err = released.Int64(); err != nil {
		return handOverReply{}, err
	}
	body := redis.NewCmd(context.Background())
	body.SetVal(acq)
	r.acq, err = parseAcquire(body)
	r.acq.permit, r.acq.pttl = permit, cmp.Or(r.acq.pttl, -1)
	return r, err
}

// parsePermitAcquire reads permit_acquire.lua's reply: acquire.lua's answer
// on the permit the node picked, with that permit and the permits free on
// the node; or a refusal because the node's permits are held with another
// limit (mismatch, {-2, limit}).
func parsePermitAcquire(cmd *redis.Cmd) (acqReply, error) {
	permit, body, free, err := permitReply(cmd)
	if err != nil {
		return acqReply{}, err
	}
	var frees []int
	if fv, ok := free.([]any); ok {
		for _, f := range fv {
			frees = append(frees, int(toInt(f)))
		}
	}
	if v, _ := body.Slice(); len(v) == 2 && toInt(v[0]) == -2 {
		return acqReply{pttl: -1, permit: permit, free: frees, mismatch: int(toInt(v[1]))}, nil
	}
	r, err := parseAcquire(body)
	if err != nil {
		return acqReply{}, err
	}
	r.permit, r.free = permit, frees
	if v, _ := cmd.Slice(); len(v) == 4 {
		r.full = toInt(v[3]) == 1
	}
	return r, nil
}

// semInspectReply is a node's answer to permit_inspect.lua.
type semInspectReply struct {
	limit   int // the limit of the permits held on the node; 0 when none is
	holders []holder
}

// parsePermitInspect reads permit_inspect.lua's reply: {limit, {permit,
// token, pttl, fence, nf, owner}...}.
func parsePermitInspect(cmd *redis.Cmd) (semInspectReply, error) {
	v, err := cmd.Slice()
	if err != nil {
		return semInspectReply{}, err
	}
	if len(v) == 0 {
		return semInspectReply{}, errors.New("empty inspect reply")
	}
	r := semInspectReply{limit: int(toInt(v[0]))}
	for _, e := range v[1:] {
		p, ok := e.([]any)
		if !ok || len(p) != 6 {
			continue
		}
		h := holder{permit: int(toInt(p[0])), pttl: toInt(p[2])}
		h.token, _ = p[1].(string)
		h.fence, h.committed, h.owner = recorded(p[3:])
		r.holders = append(r.holders, h)
	}
	return r, nil
}

// parseRelease reads release.lua's reply.
func parseRelease(cmd *redis.Cmd) (relReply, error) {
	v, err := cmd.Int64()
	return relReply{v: v}, err
}

// parseCommit reads commit.lua's reply.
func parseCommit(cmd *redis.Cmd) (commitReply, error) {
	v, err := cmd.Slice()
	if err != nil {
		return commitReply{}, err
	}
	return commitReplyOf(v)
}
