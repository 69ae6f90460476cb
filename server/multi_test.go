package server

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redlockd/redlockd/redlock"
)

// TestMultiRoutes: POST, DELETE and PATCH /locks reach the coordinator's
// multi-resource calls with the resources in order, and answer with every
// resource's fencing token and the Location that names them.
func TestMultiRoutes(t *testing.T) {
	f := newFake(t)
	var got []string
	f.AcquireMultiFn = func(_ context.Context, rs []string, o redlock.AcquireOptions) (redlock.MultiLock, error) {
		got = rs
		if o.TTL != 5*time.Second || o.Owner != "job" {
			t.Errorf("options %+v", o)
		}
		return redlock.MultiLock{Resources: rs, Token: tokenA, Fences: []int64{7, 3}, TTL: o.TTL, Validity: time.Second, Nodes: 5, Quorum: 3, Locked: 3}, nil
	}
	f.ReleaseMultiFn = func(_ context.Context, _ string, rs []string, token string) error {
		got = append(rs, token)
		return nil
	}
	f.ExtendMultiFn = func(_ context.Context, _ string, rs []string, token string, ttl time.Duration) (redlock.MultiLock, error) {
		got = append(rs, token)
		return redlock.MultiLock{Resources: rs, Token: token, Fences: []int64{7, 3}, TTL: ttl, Nodes: 5, Quorum: 3, Locked: 4}, nil
	}
	_, h := newHandler(f, nil)

	w := serve(t, h, request{method: "POST", target: "/locks", body: `{"resources":["b:1","a"],"ttl_ms":5000,"owner":"job"}`})
	if w.Code != http.StatusCreated || w.Header().Get("Location") != "/locks?resource=b%3A1&resource=a" {
		t.Fatalf("acquire: %d, Location %q, %s", w.Code, w.Header().Get("Location"), w.Body)
	}
	var body struct {
		Resources []struct {
			Resource     string `json:"resource"`
			FencingToken int64  `json:"fencing_token"`
		} `json:"resources"`
		Token string `json:"token"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Token != tokenA || len(body.Resources) != 2 ||
		body.Resources[0].Resource != "b:1" || body.Resources[0].FencingToken != 7 || body.Resources[1].FencingToken != 3 {
		t.Errorf("acquire body %s (%v)", w.Body, err)
	}
	if !slices.Equal(got, []string{"b:1", "a"}) {
		t.Errorf("acquired %v", got)
	}
	w = serve(t, h, request{method: "DELETE", target: "/locks?resource=b%3A1&resource=a", headers: []string{"Lock-Token", tokenA}})
	if w.Code != http.StatusNoContent || !slices.Equal(got, []string{"b:1", "a", tokenA}) {
		t.Errorf("release: %d %v", w.Code, got)
	}
	w = serve(t, h, request{method: "PATCH", target: "/locks?resource=a&resource=b", body: `{"ttl_ms":2000}`, headers: []string{"Lock-Token", tokenA}})
	if w.Code != http.StatusOK || !slices.Equal(got, []string{"a", "b", tokenA}) || !strings.Contains(w.Body.String(), `"locked_nodes":4`) {
		t.Errorf("extend: %d %v %s", w.Code, got, w.Body)
	}
}

// TestMultiBadInput: a multi-resource request with bad resources is 400
// and reaches no coordinator call (newFake fails the test if it does).
func TestMultiBadInput(t *testing.T) {
	_, h := newHandler(newFake(t), nil)
	many := `"r0"` + strings.Repeat(`,"r"`, 0)
	for i := 1; i <= redlock.MaxResources; i++ {
		many += `,"r` + string(rune('a'+i)) + `"`
	}
	tok := []string{"Lock-Token", tokenA}
	for name, req := range map[string]request{
		"no body":                  {method: "POST", target: "/locks"},
		"no resources":             {method: "POST", target: "/locks", body: `{}`},
		"empty resources":          {method: "POST", target: "/locks", body: `{"resources":[]}`},
		"too many resources":       {method: "POST", target: "/locks", body: `{"resources":[` + many + `]}`},
		"duplicate":                {method: "POST", target: "/locks", body: `{"resources":["a","b","a"]}`},
		"bad name":                 {method: "POST", target: "/locks", body: `{"resources":["a","b/c"]}`},
		"dot name":                 {method: "POST", target: "/locks", body: `{"resources":[".."]}`},
		"not a string":             {method: "POST", target: "/locks", body: `{"resources":["a",1]}`},
		"unknown member":           {method: "POST", target: "/locks", body: `{"resources":["a"],"mode":"read"}`},
		"bad ttl":                  {method: "POST", target: "/locks", body: `{"resources":["a"],"ttl_ms":1}`},
		"release without resource": {method: "DELETE", target: "/locks", headers: tok},
		"release duplicate":        {method: "DELETE", target: "/locks?resource=a&resource=a", headers: tok},
		"release bad token":        {method: "DELETE", target: "/locks?resource=a", headers: []string{"Lock-Token", "short"}},
		"release no token":         {method: "DELETE", target: "/locks?resource=a"},
		"extend bad name":          {method: "PATCH", target: "/locks?resource=a%2Fb", headers: tok},
		"extend bad ttl":           {method: "PATCH", target: "/locks?resource=a", body: `{"ttl_ms":0}`, headers: tok},
	} {
		t.Run(name, func(t *testing.T) {
			checkProblem(t, serve(t, h, req), http.StatusBadRequest, "invalid-request")
		})
	}
}

// TestMultiNoResource: DELETE and PATCH /locks without a resource parameter
// are 400 with a detail that names the missing parameter.
func TestMultiNoResource(t *testing.T) {
	_, h := newHandler(newFake(t), nil)
	for _, method := range []string{"DELETE", "PATCH"} {
		w := serve(t, h, request{method: method, target: "/locks", headers: []string{"Lock-Token", tokenA}})
		if p := checkProblem(t, w, http.StatusBadRequest, "invalid-request"); !strings.Contains(p.Detail, "resource") {
			t.Errorf("%s /locks: detail %q does not name the resource parameter", method, p.Detail)
		}
	}
}
