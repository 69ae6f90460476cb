package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redlockd/redlockd/api"
	"github.com/redlockd/redlockd/redlock"
)

func TestListLocks(t *testing.T) {
	f := newFake(t)
	var got []redlock.ListOptions
	f.ListFn = func(_ context.Context, o redlock.ListOptions) (redlock.Page, error) {
		got = append(got, o)
		switch o.Cursor {
		case "bad":
			return redlock.Page{}, fmt.Errorf("%w: cursor is malformed", redlock.ErrInvalid)
		case "down":
			return redlock.Page{}, redlock.ErrQuorumUnavailable
		case "last":
			return redlock.Page{Locks: []redlock.Info{}}, nil
		}
		return redlock.Page{Next: "last", Locks: []redlock.Info{
			{Namespace: o.Namespace, Resource: "job-1", Owner: "w", Fence: 7, Remaining: 1500 * time.Millisecond, HeldNodes: 3},
		}}, nil
	}
	h := newAuthHandler(t, f, nil, nil)
	auth := []string{"Authorization", "Bearer " + keyA}

	w := serve(t, h, request{method: "GET", target: "/locks?prefix=job-&limit=7&other=1", headers: auth})
	body := w.Body.String()
	page := decode[api.LockList](t, w, http.StatusOK)
	want := api.ListedLock{Resource: "job-1", Owner: "w", FencingToken: 7, RemainingMs: 1500, HeldNodes: 3}
	if len(page.Locks) != 1 || page.Locks[0] != want || page.NextCursor == nil || *page.NextCursor != "last" {
		t.Fatalf("page %s", body)
	}
	if strings.Contains(body, `"token"`) {
		t.Fatalf("a token in %s", body)
	}
	if exp := (redlock.ListOptions{Namespace: "ns-a", Prefix: "job-", Limit: 7}); got[0] != exp {
		t.Fatalf("options %+v, want %+v", got[0], exp)
	}
	w = serve(t, h, request{method: "GET", target: "/locks?cursor=last", headers: auth})
	if page := decode[api.LockList](t, w, http.StatusOK); page.NextCursor != nil || page.Locks == nil {
		t.Fatalf("last page %+v", page)
	}
	if exp := (redlock.ListOptions{Namespace: "ns-a", Limit: redlock.DefaultListLimit, Cursor: "last"}); got[1] != exp {
		t.Fatalf("options %+v, want %+v", got[1], exp)
	}

	for _, target := range []string{"/locks?limit=0", "/locks?limit=1001", "/locks?limit=x", "/locks?limit=1&limit=2",
		"/locks?prefix=a*", "/locks?prefix=a%2Fb", "/locks?prefix=" + strings.Repeat("a", 201), "/locks?cursor=bad"} {
		checkProblem(t, serve(t, h, request{method: "GET", target: target, headers: auth}), http.StatusBadRequest, "invalid-request")
	}
	checkProblem(t, serve(t, h, request{method: "GET", target: "/locks?cursor=down", headers: auth}), http.StatusServiceUnavailable, "quorum-unavailable")
	checkProblem(t, serve(t, h, request{method: "GET", target: "/locks"}), http.StatusUnauthorized, "unauthorized")
	checkProblem(t, serve(t, h, request{method: "PUT", target: "/locks", headers: auth}), http.StatusMethodNotAllowed, "method-not-allowed")
	if len(got) != 4 { // the bad cursor and the unavailable page reached it; the rest did not
		t.Fatalf("List called %d times", len(got))
	}
}
