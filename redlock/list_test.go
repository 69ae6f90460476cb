package redlock

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"
)

// listAll lists every page of o with limit, and counts how often each
// resource was listed.
func listAll(t *testing.T, c *Coordinator, o ListOptions) (map[string]int, map[string]Info) {
	t.Helper()
	seen, infos := map[string]int{}, map[string]Info{}
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("the listing does not end")
		}
		p, err := c.List(t.Context(), o)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Locks) > o.Limit {
			t.Fatalf("%d locks on a page of limit %d", len(p.Locks), o.Limit)
		}
		for _, l := range p.Locks {
			seen[l.Resource]++
			infos[l.Resource] = l
		}
		if p.Next == "" {
			return seen, infos
		}
		o.Cursor = p.Next
	}
}

func TestList(t *testing.T) {
	cl := newCluster(t, 5, Options{})
	ctx := t.Context()
	pre := uniq(t) + "-"
	want := map[string]Lock{}
	for i := range 23 {
		res := fmt.Sprintf("%sjob-%02d", pre, i)
		l, err := cl.c.Acquire(ctx, res, AcquireOptions{Namespace: "a", TTL: 10 * time.Second, Owner: "w"})
		if err != nil {
			t.Fatal(err)
		}
		want[res] = l
	}
	for _, res := range []string{pre + "job-03", pre + "job-17"} { // released: not listed
		if err := cl.c.Release(ctx, "a", res, want[res].Token); err != nil {
			t.Fatal(err)
		}
		delete(want, res)
	}
	other, err := cl.c.Acquire(ctx, pre+"other", AcquireOptions{Namespace: "a", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.c.Acquire(ctx, pre+"job-b", AcquireOptions{Namespace: "b", TTL: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	// Held on a minority only (2 of 5 nodes): not listed.
	for _, s := range cl.servers[:2] {
		if err := s.Client().Set(ctx, "redlockd:lock:a/"+pre+"job-minority", "0123456789012345678901", 10*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	}
	cl.settle()

	check := func(t *testing.T, seen map[string]int, infos map[string]Info) {
		t.Helper()
		if got, exp := slices.Sorted(maps.Keys(seen)), slices.Sorted(maps.Keys(want)); !slices.Equal(got, exp) {
			t.Fatalf("listed %v, want %v", got, exp)
		}
		for res, n := range seen {
			l, info := want[res], infos[res]
			if n != 1 || info.Fence != l.Fence || info.Owner != "w" || info.Namespace != "a" ||
				info.Remaining <= 0 || info.Remaining > 10*time.Second || info.HeldNodes < 3 {
				t.Fatalf("%s listed %d times as %+v, want once as %+v", res, n, info, l)
			}
		}
	}
	for _, limit := range []int{1, 4, 1000} {
		t.Run(fmt.Sprint("limit ", limit), func(t *testing.T) {
			seen, infos := listAll(t, cl.c, ListOptions{Namespace: "a", Prefix: pre + "job-", Limit: limit})
			check(t, seen, infos)
		})
	}
	t.Run("small scans", func(t *testing.T) { // several SCAN calls per node
		defer func(n int64) { scanCount = n }(scanCount)
		scanCount = 2
		for _, limit := range []int{3, 1000} {
			seen, infos := listAll(t, cl.c, ListOptions{Namespace: "a", Prefix: pre + "job-", Limit: limit})
			check(t, seen, infos)
		}
	})
	t.Run("namespace and prefix", func(t *testing.T) {
		seen, _ := listAll(t, cl.c, ListOptions{Namespace: "a", Prefix: pre, Limit: 100})
		if seen[pre+"other"] != 1 || seen[pre+"job-b"] != 0 || len(seen) != len(want)+1 {
			t.Fatalf("listed %v", seen)
		}
		seen, _ = listAll(t, cl.c, ListOptions{Namespace: "b", Prefix: pre, Limit: 100})
		if len(seen) != 1 || seen[pre+"job-b"] != 1 {
			t.Fatalf("namespace b listed %v", seen)
		}
		if seen, _ = listAll(t, cl.c, ListOptions{Namespace: "c", Limit: 100}); len(seen) != 0 {
			t.Fatalf("namespace c listed %v", seen)
		}
	})
	t.Run("node down", func(t *testing.T) {
		for _, mask := range []int{1, 1 << 2, 1<<4 | 1} {
			cl.setDown(mask)
			seen, infos := listAll(t, cl.c, ListOptions{Namespace: "a", Prefix: pre + "job-", Limit: 5})
			check(t, seen, infos)
		}
		cl.setDown(1<<3 | 1<<1 | 1)
		_, err := listPages(t, cl.c, ListOptions{Namespace: "a", Prefix: pre + "job-", Limit: 5})
		if !errors.Is(err, ErrQuorumUnavailable) {
			t.Fatalf("3 of 5 nodes down: err = %v, want ErrQuorumUnavailable", err)
		}
		// The error counts every node that failed in the call, not the last.
		cl.setDown(1<<5 - 1)
		_, err = cl.c.List(ctx, ListOptions{Namespace: "a", Limit: 5})
		if u := Explain(err); u.Refused["ERR"]+u.Silent+u.Unreachable != 3 {
			t.Fatalf("every node down: err = %v (%+v), want one that counts the 3 nodes that failed", err, u)
		}
		cl.setDown(0)
	})
	if err := cl.c.Release(ctx, "a", pre+"other", other.Token); err != nil {
		t.Fatal(err)
	}
}

// listPages lists every page of o and returns the error that ended it.
func listPages(t *testing.T, c *Coordinator, o ListOptions) (int, error) {
	for pages := 1; pages < 1000; pages++ {
		p, err := c.List(t.Context(), o)
		if err != nil || p.Next == "" {
			return pages, err
		}
		o.Cursor = p.Next
	}
	t.Fatal("the listing does not end")
	return 0, nil
}

func TestListInvalid(t *testing.T) {
	cl := newCluster(t, 3, Options{})
	for _, o := range []ListOptions{
		{Limit: -1}, {Limit: MaxListLimit + 1}, {Prefix: "a/b"}, {Prefix: "a*"}, {Prefix: string(make([]byte, 201))},
		{Namespace: "a/b"}, {Cursor: "%%%"}, {Cursor: "MQ"}, {Cursor: listCursor{node: 3}.String()},
		{Cursor: listCursor{node: 1, failed: 2}.String()}, {Cursor: listCursor{after: "a/b"}.String()},
	} {
		if _, err := cl.c.List(t.Context(), o); !errors.Is(err, ErrInvalid) {
			t.Errorf("List(%+v) err = %v, want ErrInvalid", o, err)
		}
	}
	p, err := cl.c.List(t.Context(), ListOptions{Prefix: "."})
	if err != nil || len(p.Locks) != 0 {
		t.Fatalf("List of an empty namespace = %+v, %v", p, err)
	}
}

// TestListReaders: a lock held by readers only is listed once, as read
// with its readers counted; a released lock, whose fence key stays, is not.
func TestListReaders(t *testing.T) {
	cl := newCluster(t, 5, Options{})
	ctx := t.Context()
	pre := uniq(t) + "-"
	read := AcquireOptions{Namespace: "a", TTL: 10 * time.Second, Mode: ModeRead, Owner: "r"}
	for range 2 {
		if _, err := cl.c.Acquire(ctx, pre+"r", read); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cl.c.Acquire(ctx, pre+"w", AcquireOptions{Namespace: "a", TTL: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	x, err := cl.c.Acquire(ctx, pre+"x", AcquireOptions{Namespace: "a", TTL: 10 * time.Second})
	if err == nil {
		err = cl.c.Release(ctx, "a", pre+"x", x.Token)
	}
	if err != nil {
		t.Fatal(err)
	}
	cl.settle()
	defer func(n int64) { scanCount = n }(scanCount)
	for _, n := range []int64{2, 100} {
		scanCount = n
		seen, infos := listAll(t, cl.c, ListOptions{Namespace: "a", Prefix: pre, Limit: 1})
		if len(seen) != 2 || seen[pre+"r"] != 1 || seen[pre+"w"] != 1 {
			t.Fatalf("scan count %d: listed %v, want %sr and %sw once", n, seen, pre, pre)
		}
		if r := infos[pre+"r"]; r.Mode != ModeRead || r.Readers != 2 || r.Owner != "r" || infos[pre+"w"].Mode != ModeWrite {
			t.Errorf("listed %+v and %+v", r, infos[pre+"w"])
		}
	}
}
