package server

import (
	"net/http"
	"strings"

	"github.com/redlockd/redlockd/api"
)

// The fast path. Under load nearly every request is a plain acquire or
// release, and the generic layers under front (chi's routing, which copies
// the request and makes a map of path values; the generated wrappers, which
// bind parameters by reflection; the strict handler, which runs a JSON
// decoder over the empty body strictJSON leaves it) cost the gateway about
// 7 us of CPU per acquire+release, some 9 % of all it spends on one (see
// docs/measuring.md). serveFast serves those two requests itself, with
// the same Server methods, body decoding and error handling as the generated
// code: the responses, log lines and metrics are the same, as
// TestFastPathSameAsGenerated checks request by request against the
// generated path. Anything else (another method or path, a query string, an
// escaped path, no or several Lock-Token values) takes the generated path.
// openapi.yaml stays the contract: if these operations gain a parameter,
// TestFastPathParams fails until serveFast learns it.

// lockRoute is the route pattern of the lock operations.
const lockRoute = "/locks/{resource}"

// acquireBody is the request body of an acquire.
var acquireBody = jsonBodies[http.MethodPost+" "+lockRoute]

// fastRoute returns the resource of a request that serveFast serves: a POST
// or DELETE of /locks/{resource}, with no escapes in the path, no query
// string, and, for a DELETE, exactly one non-empty Lock-Token.
func fastRoute(r *http.Request) (resource string, ok bool) {
	if r.Method != http.MethodPost && r.Method != http.MethodDelete ||
		r.URL.RawPath != "" || r.URL.RawQuery != "" || r.URL.ForceQuery {
		return "", false
	}
	resource, ok = strings.CutPrefix(r.URL.Path, "/locks/")
	if !ok || resource == "" || strings.IndexByte(resource, '/') >= 0 {
		return "", false
	}
	if r.Method == http.MethodDelete {
		if t := r.Header["Lock-Token"]; len(t) != 1 || t[0] == "" {
			return "", false
		}
	}
	return resource, true
}

// serveFast serves r, from front, if fastRoute takes it, and reports
// whether it did.
func (s *Server) serveFast(w http.ResponseWriter, r *http.Request, rq *reqInfo) bool {
	resource, ok := fastRoute(r)
	if !ok || s.noFastPath {
		return false
	}
	rq.pattern, rq.pathResource = lockRoute, resource
	ctx := r.Context()
	var err error
	if r.Method == http.MethodPost {
		if !s.readJSONBody(w, r, rq, acquireBody) {
			return true
		}
		var resp api.AcquireLockResponseObject
		if resp, err = s.AcquireLock(ctx, api.AcquireLockRequestObject{Resource: resource}); err == nil {
			err = resp.VisitAcquireLockResponse(w)
		}
	} else {
		req := api.ReleaseLockRequestObject{Resource: resource, Params: api.ReleaseLockParams{LockToken: r.Header["Lock-Token"][0]}}
		var resp api.ReleaseLockResponseObject
		if resp, err = s.ReleaseLock(ctx, req); err == nil {
			err = resp.VisitReleaseLockResponse(w)
		}
	}
	if err != nil {
		s.writeProblem(w, r, err)
	}
	return true
}
