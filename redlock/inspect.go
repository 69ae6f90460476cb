package redlock

import (
	"context"
	"slices"
	"time"
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
	// One group per token: of the writer's lock key, or of a reader.
	writers, readers := holdings[string]{}, holdings[string]{}
	best := &holding{} // the writer held on most nodes
	var errs []error
	answers, waiting := 0, wait
	keys := c.lockKeysOf(namespace, resource).inspect()
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
				if g := writers.add(h.token, h, r.node); g.count > best.count {
					best = g
				}
			default:
				readers.add(h.token, h, r.node)
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
		info := best.info(namespace, resource, c.quorum)
		info.Mode = ModeWrite
		return info, best.first, nil
	}
	// Readers: the one held longest speaks for them, with their greatest fence.
	most, n, first, fence := best.count, 0, -1, int64(0)
	var longest *holding
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
		if longest == nil || g.remaining > longest.remaining {
			longest = g
		}
	}
	switch {
	case n > 0:
		info := longest.info(namespace, resource, c.quorum)
		info.Mode, info.Readers, info.Fence = ModeRead, n, fence
		return info, first, nil
	case most+len(errs) >= c.quorum:
		return Info{}, -1, unavailable(errs)
	}
	return Info{}, -1, ErrNotHeld
}

// InspectSemaphore tells which permits of the semaphore a quorum holds (each
// permit as Inspect tells a lock). A semaphore with no permit held is a
// SemaphoreInfo with Limit 0 and no error. It waits for every node's answer,
// at most the node timeout. May return ErrInvalid or ErrQuorumUnavailable.
func (c *Coordinator) InspectSemaphore(ctx context.Context, namespace, name string) (SemaphoreInfo, error) {
	if err := c.checkName(namespace, name); err != nil {
		return SemaphoreInfo{}, err
	}
	// One group per permit and token.
	type permitToken struct {
		permit int
		token  string
	}
	groups := holdings[permitToken]{}
	limits := map[int]int{}
	answered := 0
	var errs []error
	keys := c.semaphoreKeysOf(namespace, name).inspect()
	replies, rd := runScript(ctx, c, c.idxs, scriptPermitInspect, keys, nil, parsePermitInspect, nil)
	rd.stragglers(nil)
	for _, r := range replies {
		if r.err == nil && c.nodes[r.node].quarantined(time.Now()) {
			r.err = c.nodes[r.node].fail(errQuarantined)
		}
		if r.err != nil {
			errs = append(errs, r.err)
			continue
		}
		answered++
		if r.val.limit > 0 {
			limits[r.val.limit]++
		}
		for _, h := range r.val.holders {
			groups.add(permitToken{h.permit, h.token}, h, r.node)
		}
	}
	if answered < c.quorum {
		return SemaphoreInfo{}, unavailable(errs)
	}
	info := SemaphoreInfo{Namespace: namespace, Name: name}
	for k, g := range groups {
		if g.count >= c.quorum {
			l := g.info(namespace, name, c.quorum)
			info.Permits = append(info.Permits, PermitInfo{Index: k.permit, Owner: l.Owner, Fence: l.Fence, Remaining: l.Remaining, HeldNodes: l.HeldNodes})
		}
	}
	slices.SortFunc(info.Permits, func(a, b PermitInfo) int { return a.Index - b.Index })
	if len(info.Permits) > 0 {
		info.Limit = most(limits)
	}
	return info, nil
}

// holding is what the nodes that answered an inspect round say about one
// holder (a token; of a semaphore, a token on a permit): the one grouping of
// records that Inspect, InspectSemaphore and List share.
type holding struct {
	count     int // nodes that hold it
	first     int // the lowest index of a node that holds it
	fence     fenceChoice
	remaining time.Duration // the least remaining TTL over those nodes
	owner     string
}

// holdings are the holders seen in a round, by key.
type holdings[K comparable] map[K]*holding

// add counts h, read on node, for the holder k.
func (hs holdings[K]) add(k K, h holder, node int) *holding {
	ttl := time.Duration(h.pttl) * time.Millisecond
	g := hs[k]
	if g == nil {
		g = &holding{first: node, remaining: ttl}
		hs[k] = g
	}
	g.count++
	g.first = min(g.first, node)
	g.remaining = min(g.remaining, ttl)
	g.fence.add(h.committed, h.fence)
	g.owner = h.owner
	return g
}

// info is what Inspect tells of the holder g of resource, given a quorum q
// (its fence: see fenceChoice); Mode and Readers are the caller's.
func (g *holding) info(namespace, resource string, q int) Info {
	fence, _ := g.fence.value(q)
	return Info{Namespace: namespace, Resource: resource, Owner: g.owner, Fence: fence, Remaining: g.remaining, HeldNodes: g.count}
}
