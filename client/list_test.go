package client_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/redlockd/redlockd/client"
)

func TestList(t *testing.T) {
	gw := startGateway(t, 3, nil)
	c := newClient(t, gw.URL, client.Options{})
	ctx := context.Background()
	want := map[string]int64{}
	for i := range 7 {
		res := fmt.Sprintf("list-%d", i)
		l, err := c.Acquire(ctx, res, client.AcquireOptions{TTL: 30 * time.Second, Owner: "me"})
		if err != nil {
			t.Fatal(err)
		}
		want[res] = l.Fence
	}
	if _, err := c.Acquire(ctx, "other", client.AcquireOptions{TTL: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}

	got := map[string]int64{}
	for o := (client.ListOptions{Prefix: "list-", Limit: 2}); ; {
		page, err := c.List(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range page.Locks {
			if _, dup := got[l.Resource]; dup || !l.Held || l.Owner != "me" || l.Remaining <= 0 || l.HeldNodes < 2 {
				t.Fatalf("listed %+v (again: %v)", l, dup)
			}
			got[l.Resource] = l.Fence
		}
		if page.Next == "" {
			break
		}
		o.Cursor = page.Next
	}
	if !maps.Equal(got, want) {
		t.Fatalf("listed %v, want %v", got, want)
	}

	var all []string
	for l, err := range c.All(ctx, "") {
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, l.Resource)
	}
	if slices.Sort(all); !slices.Equal(all, append(slices.Sorted(maps.Keys(want)), "other")) {
		t.Fatalf("All listed %v", all)
	}

	for _, o := range []client.ListOptions{{Limit: -1}, {Limit: 1001}, {Prefix: "a/b"}, {Cursor: "bad!"}} {
		if _, err := c.List(ctx, o); !errors.Is(err, client.ErrInvalid) {
			t.Errorf("List(%+v) err = %v, want ErrInvalid", o, err)
		}
	}
	for _, err := range c.All(ctx, "a*") {
		if !errors.Is(err, client.ErrInvalid) {
			t.Errorf("All(a*) err = %v, want ErrInvalid", err)
		}
	}
}
