package tests

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

// The contract as other tools read it: every request a test sends through
// a Gateway and every response it gets are checked against openapi.yaml by
// kin-openapi's openapi3filter. Requests may be sent from goroutines that
// have no *testing.T, so mismatches are collected, and TestMain fails the
// run when there is one, listing them (a verbose run lists the counts too).

var contract struct {
	once   sync.Once
	router routers.Router
	err    error

	mu        sync.Mutex
	requests  int
	responses int
	problems  map[string]int // "<kind> <method> <route> <status>: <error>" → count
}

func contractRouter() (routers.Router, error) {
	contract.once.Do(func() {
		// /metrics may answer OpenMetrics: text, as far as the contract says.
		openapi3filter.RegisterBodyDecoder("application/openmetrics-text", openapi3filter.PlainBodyDecoder)
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromFile("../openapi.yaml")
		if err == nil {
			err = doc.Validate(context.Background())
		}
		if err == nil {
			doc.Servers = nil // any host: the gateways listen on free ports
			contract.router, err = legacy.NewRouter(doc)
		}
		contract.err = err
	})
	return contract.router, contract.err
}

// checkContract validates req (whose body was body) and r against the
// contract, and records what does not conform.
func checkContract(req *http.Request, body string, r *Resp) {
	router, err := contractRouter()
	if err != nil {
		noteContract("load", req, 0, err)
		return
	}
	// The router matches the path only: the gateway's host is not the spec's.
	// HEAD is GET without a body (openapi.yaml says so in words).
	head := req.Method == http.MethodHead
	get := req
	if head {
		get = req.Clone(context.Background())
		get.Method = http.MethodGet
	}
	route, params, err := router.FindRoute(get)
	if err == nil && slices.Contains(slices.Collect(maps.Values(params)), "") {
		// kin's legacy router matches POST /locks to /locks/{resource}
		// with an empty resource: no route of the contract.
		err = routers.ErrPathNotFound
	}
	if err != nil {
		// A path or method the contract does not have must be refused, with
		// a response that every operation declares for that status.
		if stand := standIn(router, req, r); stand != nil {
			checkResponse(req, stand, r)
		} else if r.Status != http.StatusBadRequest {
			noteContract("route", req, r.Status, err)
		}
		return
	}
	vreq := get.Clone(context.Background())
	vreq.Body = io.NopCloser(strings.NewReader(body))
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true, MultiError: true,
		ExcludeResponseBody: head}
	in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route, Options: opts}
	reqErr := openapi3filter.ValidateRequest(context.Background(), in)
	respErr := openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: r.Status, Header: r.Header, Body: io.NopCloser(bytes.NewReader(r.Body)), Options: opts,
	})
	contract.mu.Lock()
	contract.requests++
	contract.responses++
	contract.mu.Unlock()
	// A request the server refused (4xx) may well break the contract: that
	// is what the test sends it for. One that keeps it must not be refused
	// as malformed, unless for what the document states only in words (a
	// configured maximum, an opaque cursor that is not one). kin-openapi
	// reads the first JSON value of a body and ignores what follows;
	// application/json allows one value only.
	switch {
	case reqErr != nil && r.Status < 400:
		noteContract("request", req, r.Status, reqErr)
	case reqErr == nil && r.Status == http.StatusBadRequest && (body == "" || json.Valid([]byte(body))) && !beyondSchema(r.Body):
		noteContract("request allowed but refused", req, r.Status, fmt.Errorf("%s", truncate(string(r.Body), 200)))
	}
	if respErr != nil {
		noteContract("response", req, r.Status, respErr)
	}
}

// standIn is the route whose responses r, an answer to a request that no
// operation matches, is checked against: a 404 against any operation's
// (inspectLock's), a 405 against an operation of the same path.
func standIn(router routers.Router, req *http.Request, r *Resp) *routers.Route {
	alt := req.Clone(context.Background())
	switch r.Status {
	case http.StatusNotFound:
		alt.Method, alt.URL.Path, alt.URL.RawPath = http.MethodGet, "/locks/stand-in", ""
	case http.StatusMethodNotAllowed:
		alt.Method, _, _ = strings.Cut(r.Header.Get("Allow"), ",")
	default:
		return nil
	}
	route, _, err := router.FindRoute(alt)
	if err != nil {
		return nil
	}
	return route
}

// checkResponse validates r alone against route's responses.
func checkResponse(req *http.Request, route *routers.Route, r *Resp) {
	opts := &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true, ExcludeResponseBody: req.Method == http.MethodHead}
	in := &openapi3filter.RequestValidationInput{Request: req, Route: route, Options: opts}
	err := openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: r.Status, Header: r.Header, Body: io.NopCloser(bytes.NewReader(r.Body)), Options: opts,
	})
	contract.mu.Lock()
	contract.responses++
	contract.mu.Unlock()
	if err != nil {
		noteContract("response", req, r.Status, err)
	}
}

// beyondSchema reports whether a 400 problem body refuses what openapi.yaml
// states in words only: a value over a limit of the server's configuration,
// or a cursor that no page of this gateway's nodes gave.
func beyondSchema(body []byte) bool {
	for _, s := range []string{"must be within", "at most", "cursor is "} {
		if bytes.Contains(body, []byte(s)) {
			return true
		}
	}
	return false
}

func noteContract(kind string, req *http.Request, status int, err error) {
	msg, _, _ := strings.Cut(err.Error(), "\n")
	key := fmt.Sprintf("%s %s %s %d: %s", kind, req.Method, routeOf(req.URL.Path), status, truncate(msg, 160))
	contract.mu.Lock()
	defer contract.mu.Unlock()
	if contract.problems == nil {
		contract.problems = map[string]int{}
	}
	contract.problems[key]++
}

// routeOf names a path by its route, so that lock names do not multiply the
// problems listed.
func routeOf(path string) string {
	if rest, ok := strings.CutPrefix(path, "/locks/"); ok && rest != "" {
		return "/locks/{resource}"
	}
	return path
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// contractReport sums up what the run validated and what did not conform,
// and whether everything did.
func contractReport() (string, bool) {
	contract.mu.Lock()
	defer contract.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "contract: %d requests and %d responses validated against openapi.yaml; %d kinds of mismatch\n",
		contract.requests, contract.responses, len(contract.problems))
	keys := slices.SortedFunc(maps.Keys(contract.problems), func(a, b string) int {
		return cmp.Or(cmp.Compare(contract.problems[b], contract.problems[a]), cmp.Compare(a, b))
	})
	for _, k := range keys {
		fmt.Fprintf(&b, "  %5d  %s\n", contract.problems[k], k)
	}
	return b.String(), len(keys) == 0
}
