package redlock

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// Inspect tells who holds the lock (never the token). The lock is held when
// a quorum of nodes hold the same token: the writer's, or readers' (Mode
// ModeRead: Readers tokens are each held on a quorum). May return ErrInvalid, ErrNotHeld or
// ErrQuorumUnavailable (too many nodes silent to tell).
func (c *Coordinator) Inspect(ctx context.Context, namespace, resource string) (Info, error) {
	if err := c.checkName(namespace, resource); err != nil {
		return Info{}, err
	}
	info, _, err := c.inspect(ctx, namespace, resource, 0)
	return info, err
}

// inspect is Inspect's round on checked names. It is decided only once the
// nodes of index below wait answered or failed too, and also returns
// the lowest index among the voting nodes that hold the lock's token (of a
// read lock, a reader's) as far as they answered (see List).
func (c *Coordinator) inspect(ctx context.Context, namespace, resource string, wait int) (Info, int, error) {
	type group struct {
		count int
		first int // the lowest index of a node that holds the token
		fence fenceChoice
		info  Info
	}
	// One group per token: of the writer's lock key, or of a reader.
	writers, readers := map[string]*group{}, map[string]*group{}
	best := &group{} // the writer held on most nodes
	add := func(groups map[string]*group, h holder, node int) *group {
		g := groups[h.token]
		if g == nil {
			g = &group{first: node, info: Info{Namespace: namespace, Resource: resource, Remaining: time.Duration(h.pttl) * time.Millisecond}}
			groups[h.token] = g
		}
		g.count++
		g.first = min(g.first, node)
		g.info.Remaining = min(g.info.Remaining, time.Duration(h.pttl)*time.Millisecond)
		g.fence.add(h.committed, h.fence)
		g.info.Owner = h.owner
		return g
	}
	var errs []error
	answers, waiting := 0, wait
	keys := pick(c.keys(namespace, resource), 0, 1, 5, 6)
	_, rd := runScript(ctx, c, c.idxs, scriptInspect, keys, nil, parseInspect, func(r reply[[]holder]) bool {
		answers++
		if r.node < wait {
			waiting--
		}
		if r.err == nil && c.nodes[r.node].quarantined(time.Now()) {
			r.err = c.nodes[r.node].fail(errQuarantined)
		}
		if r.err != nil {
			errs = append(errs, r.err)
		}
		for i, h := range r.val {
			switch {
			case r.err != nil || h.token == "":
			case i == 0:
				if g := add(writers, h, r.node); g.count > best.count {
					best = g
				}
			default:
				add(readers, h, r.node)
			}
		}
		// Decided when a writer holds a quorum (and its fence is certain,
		// see fenceChoice), or none can and which readers hold a quorum is
		// certain (with their fences), and, if none does, whether too many
		// failed to tell is certain.
		pending := len(c.nodes) - answers
		if waiting > 0 {
			return false
		}
		if best.count >= c.quorum {
			_, certain := best.fence.value(c.quorum)
			return certain || pending == 0
		}
		if best.count+pending >= c.quorum {
			return false
		}
		most, held := best.count, false
		for _, g := range readers {
			_, certain := g.fence.value(c.quorum)
			if g.count+pending >= c.quorum && (g.count < c.quorum || !certain) {
				return false
			}
			most, held = max(most, g.count), held || g.count >= c.quorum
		}
		return held || most+len(errs) >= c.quorum || most+len(errs)+pending < c.quorum
	})
	rd.stragglers(nil)
	if best.count >= c.quorum {
		best.info.HeldNodes = best.count
		best.info.Fence, _ = best.fence.value(c.quorum)
		best.info.Mode = ModeWrite
		return best.info, best.first, nil
	}
	// Readers: the one held longest speaks for them, with their greatest fence.
	most, n, first, fence := best.count, 0, -1, int64(0)
	var longest *group
	for _, g := range readers {
		most = max(most, g.count)
		if g.count < c.quorum {
			continue
		}
		f, _ := g.fence.value(c.quorum)
		n, fence = n+1, max(fence, f)
		if first < 0 || g.first < first {
			first = g.first
		}
		if longest == nil || g.info.Remaining > longest.info.Remaining {
			longest = g
		}
	}
	switch {
	case n > 0:
		info := longest.info
		info.Mode, info.Readers, info.Fence, info.HeldNodes = ModeRead, n, fence, longest.count
		return info, first, nil
	case most+len(errs) >= c.quorum:
		return Info{}, -1, unavailable(errs)
	}
	return Info{}, -1, ErrNotHeld
}

// holder is a token's record on a node, as inspect.lua reads it.
type holder struct {
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

// InspectSemaphore tells which permits of the semaphore a quorum holds (each
// permit as Inspect tells a lock). A semaphore with no permit held is a
// SemaphoreInfo with Limit 0 and no error. It waits for every node's answer,
// at most the node timeout. May return ErrInvalid or ErrQuorumUnavailable.
func (c *Coordinator) InspectSemaphore(ctx context.Context, namespace, name string) (SemaphoreInfo, error) {
	if err := c.checkName(namespace, name); err != nil {
		return SemaphoreInfo{}, err
	}
	keys := c.semKeys(namespace, name)
	type holder struct {
		permit int
		token  string
	}
	type group struct {
		count int
		fence fenceChoice
		info  PermitInfo
	}
	groups := map[holder]*group{}
	limits := map[int]int{}
	answered := 0
	var errs []error
	replies, rd := runScript(ctx, c, c.idxs, scriptPermitInspect, append([]string{keys[0], keys[1]}, keys[semLimit:]...), nil, func(cmd *redis.Cmd) ([]any, error) { return cmd.Slice() }, nil)
	rd.stragglers(nil)
	for _, r := range replies {
		if r.err == nil && c.nodes[r.node].quarantined(time.Now()) {
			r.err = c.nodes[r.node].fail(errQuarantined)
		}
		if r.err != nil || len(r.val) == 0 {
			errs = append(errs, cmp.Or(r.err, errors.New("empty inspect reply")))
			continue
		}
		answered++
		if l := int(toInt(r.val[0])); l > 0 {
			limits[l]++
		}
		for _, e := range r.val[1:] {
			v, ok := e.([]any)
			if !ok || len(v) != 6 {
				continue
			}
			h := holder{permit: int(toInt(v[0]))}
			h.token, _ = v[1].(string)
			g := groups[h]
			if g == nil {
				g = &group{info: PermitInfo{Index: h.permit, Remaining: time.Duration(toInt(v[2])) * time.Millisecond}}
				groups[h] = g
			}
			g.count++
			g.info.Remaining = min(g.info.Remaining, time.Duration(toInt(v[2]))*time.Millisecond)
			fence, committed, owner := recorded(v[3:])
			g.fence.add(committed, fence)
			g.info.Owner = owner
		}
	}
	if answered < c.quorum {
		return SemaphoreInfo{}, unavailable(errs)
	}
	info := SemaphoreInfo{Namespace: namespace, Name: name}
	for _, g := range groups {
		if g.count >= c.quorum {
			g.info.HeldNodes = g.count
			g.info.Fence, _ = g.fence.value(c.quorum)
			info.Permits = append(info.Permits, g.info)
		}
	}
	slices.SortFunc(info.Permits, func(a, b PermitInfo) int { return a.Index - b.Index })
	if len(info.Permits) > 0 {
		info.Limit = most(limits)
	}
	return info, nil
}
