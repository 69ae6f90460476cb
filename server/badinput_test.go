package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
)

// badRequests are malformed requests (openapi.yaml), with the status and
// problem kind each must get. None may reach the Locker, but those beyond
// the bounds of the coordinator's configuration (max TTL, max wait), which
// it refuses (see boundedFake).
var badRequests = map[string]struct {
	req    request
	status int
	kind   string
}{
	// Bodies.
	"bad JSON":                {request{method: "POST", target: "/locks/x", body: `{"ttl_ms":`}, 400, "invalid-request"},
	"bad JSON value":          {request{method: "POST", target: "/locks/x", body: `{"ttl_ms": x}`}, 400, "invalid-request"},
	"not an object":           {request{method: "POST", target: "/locks/x", body: `[1]`}, 400, "invalid-request"},
	"null":                    {request{method: "POST", target: "/locks/x", body: `null`}, 400, "invalid-request"},
	"string":                  {request{method: "POST", target: "/locks/x", body: `"ttl_ms"`}, 400, "invalid-request"},
	"ttl string":              {request{method: "POST", target: "/locks/x", body: `{"ttl_ms": "5000"}`}, 400, "invalid-request"},
	"ttl fraction":            {request{method: "POST", target: "/locks/x", body: `{"ttl_ms": 1000.5}`}, 400, "invalid-request"},
	"ttl null":                {request{method: "POST", target: "/locks/x", body: `{"ttl_ms": null}`}, 400, "invalid-request"},
	"blank body":              {request{method: "POST", target: "/locks/x", body: " \n"}, 400, "invalid-request"},
	"ttl overflow":            {request{method: "POST", target: "/locks/x", body: `{"ttl_ms": 99999999999999999999}`}, 400, "invalid-request"},
	"wait bool":               {request{method: "POST", target: "/locks/x", body: `{"wait_ms": true}`}, 400, "invalid-request"},
	"owner number":            {request{method: "POST", target: "/locks/x", body: `{"owner": 5}`}, 400, "invalid-request"},
	"token object":            {request{method: "POST", target: "/locks/x", body: `{"token": {}}`}, 400, "invalid-request"},
	"unknown field":           {request{method: "POST", target: "/locks/x", body: `{"ttl": 5000}`}, 400, "invalid-request"},
	"field in other case":     {request{method: "POST", target: "/locks/x", body: `{"TTL_MS": 5000}`}, 400, "invalid-request"},
	"duplicate field":         {request{method: "POST", target: "/locks/x", body: `{"ttl_ms": 5000, "ttl_ms": 6000}`}, 400, "invalid-request"},
	"trailing garbage":        {request{method: "POST", target: "/locks/x", body: `{"ttl_ms": 5000} x`}, 400, "invalid-request"},
	"two objects":             {request{method: "POST", target: "/locks/x", body: `{}{}`}, 400, "invalid-request"},
	"extra brace":             {request{method: "POST", target: "/locks/x", body: `{}}`}, 400, "invalid-request"},
	"invalid UTF-8":           {request{method: "POST", target: "/locks/x", body: "{\"owner\": \"\xff\"}"}, 400, "invalid-request"},
	"ttl too small":           {request{method: "POST", target: "/locks/x", body: `{"ttl_ms": 99}`}, 400, "invalid-request"},
	"ttl zero":                {request{method: "POST", target: "/locks/x", body: `{"ttl_ms": 0}`}, 400, "invalid-request"},
	"ttl too large":           {request{method: "POST", target: "/locks/x", body: `{"ttl_ms": 60001}`}, 400, "invalid-request"},
	"wait negative":           {request{method: "POST", target: "/locks/x", body: `{"wait_ms": -1}`}, 400, "invalid-request"},
	"wait too large":          {request{method: "POST", target: "/locks/x", body: `{"wait_ms": 60001}`}, 400, "invalid-request"},
	"token too short":         {request{method: "POST", target: "/locks/x", body: `{"token": "abc"}`}, 400, "invalid-request"},
	"token empty":             {request{method: "POST", target: "/locks/x", body: `{"token": ""}`}, 400, "invalid-request"},
	"token bad characters":    {request{method: "POST", target: "/locks/x", body: `{"token": "` + strings.Repeat("+", 22) + `"}`}, 400, "invalid-request"},
	"token too long":          {request{method: "POST", target: "/locks/x", body: `{"token": "` + strings.Repeat("a", 129) + `"}`}, 400, "invalid-request"},
	"mode unknown":            {request{method: "POST", target: "/locks/x", body: `{"mode": "READ"}`}, 400, "invalid-request"},
	"mode empty":              {request{method: "POST", target: "/locks/x", body: `{"mode": ""}`}, 400, "invalid-request"},
	"mode number":             {request{method: "POST", target: "/locks/x", body: `{"mode": 1}`}, 400, "invalid-request"},
	"owner too long":          {request{method: "POST", target: "/locks/x", body: `{"owner": "` + strings.Repeat("é", 257) + `"}`}, 400, "invalid-request"},
	"form content type":       {request{method: "POST", target: "/locks/x", body: `{}`, headers: []string{"Content-Type", "application/x-www-form-urlencoded"}}, 400, "invalid-request"},
	"text content type":       {request{method: "POST", target: "/locks/x", headers: []string{"Content-Type", "text/plain"}}, 400, "invalid-request"},
	"bad content type":        {request{method: "POST", target: "/locks/x", body: `{}`, headers: []string{"Content-Type", ";;"}}, 400, "invalid-request"},
	"extend unknown field":    {request{method: "PATCH", target: "/locks/x", body: `{"wait_ms": 5}`, headers: []string{"Lock-Token", tokenA}}, 400, "invalid-request"},
	"extend ttl too large":    {request{method: "PATCH", target: "/locks/x", body: `{"ttl_ms": 60001}`, headers: []string{"Lock-Token", tokenA}}, 400, "invalid-request"},
	"extend ttl too small":    {request{method: "PATCH", target: "/locks/x", body: `{"ttl_ms": 1}`, headers: []string{"Lock-Token", tokenA}}, 400, "invalid-request"},
	"extend bad JSON":         {request{method: "PATCH", target: "/locks/x", body: `{`, headers: []string{"Lock-Token", tokenA}}, 400, "invalid-request"},
	"body too large":          {request{method: "POST", target: "/locks/x", body: `{"owner": "` + strings.Repeat("a", 16<<10) + `"}`}, 413, "payload-too-large"},
	"extend body too large":   {request{method: "PATCH", target: "/locks/x", body: strings.Repeat(" ", 16<<10+1), headers: []string{"Lock-Token", tokenA}}, 413, "payload-too-large"},
	"healthz body too large":  {request{method: "GET", target: "/healthz", body: strings.Repeat(" ", 16<<10+1)}, 413, "payload-too-large"},
	"resource slash":          {request{method: "POST", target: "/locks/a%2Fb"}, 400, "invalid-request"},
	"resource slash, GET":     {request{method: "GET", target: "/locks/a%2fb"}, 400, "invalid-request"},
	"resource too long":       {request{method: "POST", target: "/locks/" + strings.Repeat("a", 201)}, 400, "invalid-request"},
	"resource space":          {request{method: "GET", target: "/locks/a%20b"}, 400, "invalid-request"},
	"resource non-ASCII":      {request{method: "GET", target: "/locks/%C3%A9"}, 400, "invalid-request"},
	"resource percent":        {request{method: "GET", target: "/locks/a%25b"}, 400, "invalid-request"},
	"resource double-escaped": {request{method: "GET", target: "/locks/a%252Fb"}, 400, "invalid-request"},
	"resource star":           {request{method: "PATCH", target: "/locks/a*", headers: []string{"Lock-Token", tokenA}}, 400, "invalid-request"},
	"resource empty":          {request{method: "GET", target: "/locks/"}, 404, "not-found"},
	// "." and "..": clients normalise them away, so the lock could never be
	// released.
	"resource dot":         {request{method: "POST", target: "/locks/."}, 400, "invalid-request"},
	"resource dot dot":     {request{method: "POST", target: "/locks/.."}, 400, "invalid-request"},
	"resource %2E":         {request{method: "POST", target: "/locks/%2E"}, 400, "invalid-request"},
	"resource %2e%2e":      {request{method: "POST", target: "/locks/%2e%2e"}, 400, "invalid-request"},
	"resource .%2E, GET":   {request{method: "GET", target: "/locks/.%2E"}, 400, "invalid-request"},
	"resource .., release": {request{method: "DELETE", target: "/locks/..", headers: []string{"Lock-Token", tokenA}}, 400, "invalid-request"},
	"resource %2E, extend": {request{method: "PATCH", target: "/locks/%2E", headers: []string{"Lock-Token", tokenA}}, 400, "invalid-request"},
	// Lock-Token.
	"release no token":     {request{method: "DELETE", target: "/locks/x"}, 400, "invalid-request"},
	"release empty token":  {request{method: "DELETE", target: "/locks/x", headers: []string{"Lock-Token", ""}}, 400, "invalid-request"},
	"release short token":  {request{method: "DELETE", target: "/locks/x", headers: []string{"Lock-Token", "abc"}}, 400, "invalid-request"},
	"release bad token":    {request{method: "DELETE", target: "/locks/x", headers: []string{"Lock-Token", strings.Repeat("/", 30)}}, 400, "invalid-request"},
	"release two tokens":   {request{method: "DELETE", target: "/locks/x", headers: []string{"Lock-Token", tokenA, "Lock-Token", tokenB}}, 400, "invalid-request"},
	"extend no token":      {request{method: "PATCH", target: "/locks/x", body: `{"ttl_ms": 5000}`}, 400, "invalid-request"},
	"extend bad token":     {request{method: "PATCH", target: "/locks/x", headers: []string{"Lock-Token", tokenA + "!"}}, 400, "invalid-request"},
	"release bad resource": {request{method: "DELETE", target: "/locks/a%2Fb", headers: []string{"Lock-Token", tokenA}}, 400, "invalid-request"},
	// Routes and methods.
	"unknown path":     {request{method: "GET", target: "/nope"}, 404, "not-found"},
	"nested path":      {request{method: "GET", target: "/locks/a/b"}, 404, "not-found"},
	"trailing slash":   {request{method: "POST", target: "/locks/x/"}, 404, "not-found"},
	"locks slash":      {request{method: "GET", target: "/locks/"}, 404, "not-found"},
	"PUT locks root":   {request{method: "PUT", target: "/locks"}, 405, "method-not-allowed"},
	"PUT lock":         {request{method: "PUT", target: "/locks/x"}, 405, "method-not-allowed"},
	"OPTIONS lock":     {request{method: "OPTIONS", target: "/locks/x"}, 405, "method-not-allowed"},
	"HEAD unknown":     {request{method: "HEAD", target: "/nope"}, 404, "not-found"},
	"POST healthz":     {request{method: "POST", target: "/healthz"}, 405, "method-not-allowed"},
	"DELETE readyz":    {request{method: "DELETE", target: "/readyz"}, 405, "method-not-allowed"},
	"metrics, not yet": {request{method: "GET", target: "/metrics"}, 404, "not-found"},
}

func TestBadInput(t *testing.T) {
	for name, tc := range badRequests {
		t.Run(name, func(t *testing.T) {
			_, h := newHandler(boundedFake(t), nil)
			w := serve(t, h, tc.req)
			checkProblem(t, w, tc.status, tc.kind)
			if tc.status == 405 && w.Header().Get("Allow") == "" {
				t.Error("405 without Allow")
			}
		})
	}
}

func TestAllow(t *testing.T) {
	_, h := newHandler(newFake(t), nil)
	for target, exp := range map[string]string{
		"/locks/x":      "GET, HEAD, POST, PATCH, DELETE",
		"/locks/a%2Fb":  "GET, HEAD, POST, PATCH, DELETE",
		"/locks":        "GET, HEAD, POST, PATCH, DELETE",
		"/readyz":       "GET, HEAD",
		"/openapi.yaml": "GET, HEAD",
	} {
		w := serve(t, h, request{method: "PUT", target: target})
		if got := w.Header().Get("Allow"); got != exp {
			t.Errorf("PUT %s: Allow %q, want %q", target, got, exp)
		}
	}
}

// TestBodyTooLargeUnknownLength sends a large body without Content-Length,
// so that only reading it finds its size.
func TestBodyTooLargeUnknownLength(t *testing.T) {
	_, h := newHandler(newFake(t), nil)
	for _, method := range []string{"POST", "PATCH"} {
		r := httptest.NewRequest(method, "/locks/x", strings.NewReader(`{"owner": "`+strings.Repeat("a", 20<<10)+`"}`))
		r.ContentLength = -1
		r.Header.Set("Lock-Token", tokenA)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		checkProblem(t, w, http.StatusRequestEntityTooLarge, "payload-too-large")
	}
}

// TestBodyReadError checks that a body that cannot be read is the client's
// error.
func TestBodyReadError(t *testing.T) {
	_, h := newHandler(newFake(t), nil)
	r := httptest.NewRequest("POST", "/locks/x", iotest.ErrReader(iotest.ErrTimeout))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	checkProblem(t, w, http.StatusBadRequest, "invalid-request")
}
