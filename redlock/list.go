package redlock

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Limits of List.
const (
	DefaultListLimit = 100  // ListOptions.Limit's default
	MaxListLimit     = 1000 // the largest ListOptions.Limit
	// scansPerPage bounds the SCAN calls of a page.
	scansPerPage = 4
	// listInspects bounds the inspect rounds of a page in flight at once.
	listInspects = 64
)

// scanCount is the COUNT of each SCAN: the work it does on the node, not a
// number of results. A variable for tests.
var scanCount int64 = 1000

// ListOptions are the options of one List call.
type ListOptions struct {
	Namespace string
	// Prefix keeps only resources whose name starts with it: 0–200
	// characters of [A-Za-z0-9._:-]. Default: every resource.
	Prefix string
	// Limit bounds the locks of the page, 1..MaxListLimit. Default:
	// DefaultListLimit.
	Limit int
	// Cursor is the Next of the previous page; "" starts a listing.
	Cursor string
}

// Page is one page of a listing.
type Page struct {
	Locks []Info // held on a quorum, in no particular order
	// Next is the cursor of the next page; "" when the listing is over. A
	// page may have fewer than Limit locks, or none, and still a Next.
	Next string
}

// listCursor is where a listing stands: at node's SCAN cursor scan, past
// the names up to after in the batch that cursor returns (a batch cut by
// the limit), with failed nodes skipped so far, over the nodes named by
// set (a Coordinator's nodeSet): node is an index into them.
type listCursor struct {
	set    string
	node   int
	scan   uint64
	failed int
	after  string
}

func (lc listCursor) String() string {
	s := fmt.Sprintf("%s.%d.%d.%d.%s", lc.set, lc.node, lc.scan, lc.failed, lc.after)
	return base64.RawURLEncoding.EncodeToString([]byte(s))
}

func (c *Coordinator) parseCursor(s string) (listCursor, error) {
	var lc listCursor
	if s == "" {
		return lc, nil
	}
	errCursor := invalid("cursor is malformed: pass next_cursor as it was given")
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return lc, errCursor
	}
	f := strings.SplitN(string(b), ".", 5)
	if len(f) != 5 {
		return lc, errCursor
	}
	node, err1 := strconv.Atoi(f[1])
	scan, err2 := strconv.ParseUint(f[2], 10, 64)
	failed, err3 := strconv.Atoi(f[3])
	lc = listCursor{set: f[0], node: node, scan: scan, failed: failed, after: f[4]}
	if errors.Join(err1, err2, err3) != nil || node < 0 || node >= len(c.nodes) || failed < 0 || failed > node ||
		(lc.after != "" && !ValidName(lc.after)) {
		return listCursor{}, errCursor
	}
	if lc.set != c.nodeSet {
		// Its node index and SCAN cursor would point into another node: the
		// listing would miss locks without a word.
		return listCursor{}, invalid("cursor is from a listing over other nodes, or the same nodes in another order: start the listing again without a cursor")
	}
	return lc, nil
}

// ValidPrefix reports whether s is 0–200 characters of [A-Za-z0-9._:-].
func ValidPrefix(s string) bool {
	return len(s) <= MaxNameLen && !strings.ContainsFunc(s, func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("._:-", r))
	})
}

// globEscape escapes the characters special to Redis's glob-style MATCH.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\^`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// List returns a page of the locks of o.Namespace held on a quorum (never
// their tokens). A page SCANs the nodes in index order from the cursor's,
// at most a few SCAN calls, and inspects at most o.Limit of the names found
// on every node (as Inspect does, concurrently); a name found on node i is
// listed only if i is the lowest-index node holding the lock, so that a lock
// held by a quorum throughout a listing with every node up is listed once
// (twice only if SCAN returns it twice, which Redis does when a node's key
// table is resized meanwhile). Locks taken, released or moved, and nodes
// that fail, during a listing may make it miss a lock or list it twice; so
// may a lock whose state too few nodes answer to tell (it is left out). A
// node whose SCAN fails is skipped; ErrQuorumUnavailable once more than
// N - quorum nodes were. May return ErrInvalid or ErrQuorumUnavailable.
func (c *Coordinator) List(ctx context.Context, o ListOptions) (Page, error) {
	if o.Namespace != "" && !ValidName(o.Namespace) {
		return Page{}, invalid("namespace must be 1-%d characters of [A-Za-z0-9._:-], other than . and ..", MaxNameLen)
	}
	if !ValidPrefix(o.Prefix) {
		return Page{}, invalid("prefix must be 0-%d characters of [A-Za-z0-9._:-]", MaxNameLen)
	}
	if o.Limit == 0 {
		o.Limit = DefaultListLimit
	}
	if o.Limit < 1 || o.Limit > MaxListLimit {
		return Page{}, invalid("limit must be within [1, %d]", MaxListLimit)
	}
	lc, err := c.parseCursor(o.Cursor)
	if err != nil {
		return Page{}, err
	}
	lc.set = c.nodeSet
	// A held lock has a lock key: its writer's record, or its readers'
	// marker (see rec_read in prelude.lua); a released one may too, for a
	// while (its tombstone), which the inspect tells apart.
	base := o.Namespace + "/"
	match := globEscape(c.opts.KeyPrefix+"lock:"+base+o.Prefix) + "*"
	type candidate struct {
		node     int
		resource string
	}
	var cands []candidate
	var errs []error // of the nodes that failed in this call
	done := false
	for scans := 0; scans < scansPerPage && len(cands) < o.Limit && !done; scans++ {
		n := c.nodes[lc.node]
		sctx, cancel := context.WithTimeout(ctx, c.opts.NodeTimeout)
		keys, next, err := n.client.Scan(sctx, lc.scan, match, scanCount).Result()
		cancel()
		n.noteReply(ctx, err)
		if err != nil {
			if ctx.Err() != nil {
				return Page{}, errors.Join(ErrQuorumUnavailable, n.fail(err), ctx.Err())
			}
			errs = append(errs, n.fail(err))
			if lc.failed++; lc.failed > len(c.nodes)-c.quorum {
				return Page{}, unavailable(errs)
			}
			next, lc.after = 0, ""
		}
		var names []string
		for _, k := range keys {
			r, ok := strings.CutPrefix(k, c.opts.KeyPrefix+"lock:"+base)
			if ok && r > lc.after && strings.HasPrefix(r, o.Prefix) && ValidName(r) {
				names = append(names, r)
			}
		}
		slices.Sort(names)
		names = slices.Compact(names)
		if room := o.Limit - len(cands); len(names) > room {
			names = names[:room] // the rest of this batch is for the next page
			lc.after = names[room-1]
		} else {
			lc.scan, lc.after = next, ""
		}
		for _, r := range names {
			cands = append(cands, candidate{lc.node, r})
		}
		if lc.scan == 0 && lc.after == "" {
			lc.node++
			done = lc.node == len(c.nodes)
		}
	}

	infos := make([]Info, len(cands))
	sem := make(chan struct{}, listInspects)
	var wg sync.WaitGroup
	for i, cd := range cands {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			// Not held, or too few nodes answered to tell (a lock held on
			// a minority while a node is down): left out.
			if info, first, err := c.inspect(ctx, o.Namespace, cd.resource, cd.node+1); err == nil && first == cd.node {
				infos[i] = info
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return Page{}, errors.Join(ErrQuorumUnavailable, err)
	}
	page := Page{Locks: []Info{}}
	for _, info := range infos {
		if info.Resource != "" {
			page.Locks = append(page.Locks, info)
		}
	}
	if !done {
		page.Next = lc.String()
	}
	return page, nil
}
