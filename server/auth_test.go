package server

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/redlockd/redlockd/redlock"
)

// Test API keys: keyA reaches namespace ns-a, keyB ns-b.
const (
	keyA = "key-A-lkdfj2309fsdkjf0923lkjsdf"
	keyB = "key-B-4598dfgkj3409dfgkj3409dfg"
)

// testKeys returns the keys of keyA and keyB.
func testKeys(t testing.TB) *Keys {
	t.Helper()
	k, err := ParseKeys([]byte(`{"keys":[
		{"name":"a","namespace":"ns-a","sha256":"` + HashKey(keyA) + `"},
		{"name":"b","namespace":"ns-b","sha256":"` + strings.ToUpper(HashKey(keyB)) + `"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// newAuthHandler returns the handler of a Server over l with testKeys.
func newAuthHandler(t testing.TB, l Locker, log *syncBuffer, edit func(*Config)) http.Handler {
	t.Helper()
	cfg := Config{Locker: l, Keys: testKeys(t)}
	if log != nil {
		cfg.Log = zerolog.New(log)
	}
	if edit != nil {
		edit(&cfg)
	}
	return New(cfg).Handler()
}

func TestParseKeys(t *testing.T) {
	h := HashKey("k")
	for name, tc := range map[string]struct {
		file string
		want string // "" means valid
	}{
		"one":             {`{"keys":[{"name":"ci","namespace":"ci","sha256":"` + h + `"}]}`, ""},
		"shared ns":       {`{"keys":[{"name":"a","namespace":"x","sha256":"` + h + `"},{"name":"b","namespace":"x","sha256":"` + HashKey("l") + `"}]}`, ""},
		"empty":           {``, "not a JSON object"},
		"no keys":         {`{"keys":[]}`, "no keys"},
		"null keys":       {`{"keys":null}`, "no keys"},
		"unknown member":  {`{"keys":[{"name":"a","namespace":"a","sha256":"` + h + `","key":"k"}]}`, `unknown field "key"`},
		"unknown top":     {`{"key":[]}`, `unknown field "key"`},
		"trailing":        {`{"keys":[{"name":"a","namespace":"a","sha256":"` + h + `"}]} {}`, "unexpected data"},
		"bad name":        {`{"keys":[{"name":"a/b","namespace":"a","sha256":"` + h + `"}]}`, `key #1: name "a/b"`},
		"no namespace":    {`{"keys":[{"name":"a","sha256":"` + h + `"}]}`, `key #1 (a): namespace ""`},
		"short hash":      {`{"keys":[{"name":"a","namespace":"a","sha256":"abcd"}]}`, "key #1 (a): sha256 must be 64 hex digits"},
		"key, not hash":   {`{"keys":[{"name":"a","namespace":"a","sha256":"SeCrEtKeY"}]}`, "sha256 must be 64 hex digits"},
		"duplicate name":  {`{"keys":[{"name":"a","namespace":"a","sha256":"` + h + `"},{"name":"a","namespace":"b","sha256":"` + HashKey("l") + `"}]}`, `key #2: name "a" is already key #1's`},
		"duplicate hash":  {`{"keys":[{"name":"a","namespace":"a","sha256":"` + h + `"},{"name":"b","namespace":"b","sha256":"` + strings.ToUpper(h) + `"}]}`, "key #2 (b): same sha256 as key #1"},
		"every error":     {`{"keys":[{"name":"","namespace":"","sha256":""}]}`, "namespace"},
		"too large":       {`{"keys":[` + strings.Repeat(" ", maxKeysFileBytes) + `]}`, "larger than"},
		"wrong type":      {`{"keys":[{"name":1}]}`, "not a JSON object"},
		"keys not a list": {`{"keys":{}}`, "not a JSON object"},
	} {
		t.Run(name, func(t *testing.T) {
			k, err := ParseKeys([]byte(tc.file))
			if tc.want == "" {
				if err != nil || k.Len() == 0 {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v does not contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "SeCrEtKeY") {
				t.Fatalf("error quotes the sha256 member: %v", err)
			}
		})
	}
}

func TestAuth(t *testing.T) {
	var namespaces []string
	f := newFake(t)
	f.AcquireFn = func(_ context.Context, resource string, o redlock.AcquireOptions) (redlock.Lock, error) {
		namespaces = append(namespaces, o.Namespace)
		return testLock(resource, tokenA, o.TTL), nil
	}
	f.ReleaseFn = func(_ context.Context, namespace, _, _ string) error {
		namespaces = append(namespaces, namespace)
		return nil
	}
	f.ExtendFn = func(_ context.Context, namespace, resource, token string, ttl time.Duration) (redlock.Lock, error) {
		namespaces = append(namespaces, namespace)
		return testLock(resource, token, ttl), nil
	}
	f.InspectFn = func(_ context.Context, namespace, resource string) (redlock.Info, error) {
		namespaces = append(namespaces, namespace)
		return redlock.Info{Resource: resource}, nil
	}
	f.StatusFn = func(context.Context) []redlock.NodeStatus {
		return []redlock.NodeStatus{{Addr: "a:1", Up: true}, {Addr: "b:1", Up: true}, {Addr: "c:1", Up: true}}
	}
	log := &syncBuffer{}
	h := newAuthHandler(t, f, log, func(c *Config) { c.Metrics = NewMetrics() })

	bearer := func(key string) []string { return []string{"Authorization", "Bearer " + key} }
	for name, tc := range map[string]struct {
		req  request
		want string // the problem kind, or "" for success
		auth string // WWW-Authenticate
	}{
		"no key":                {request{method: "POST", target: "/locks/x"}, "unauthorized", `Bearer realm="redlockd"`},
		"unknown key":           {request{method: "POST", target: "/locks/x", headers: bearer("nope")}, "unauthorized", `Bearer realm="redlockd", error="invalid_token"`},
		"key's hash as key":     {request{method: "POST", target: "/locks/x", headers: bearer(HashKey(keyA))}, "unauthorized", `Bearer realm="redlockd", error="invalid_token"`},
		"key with a suffix":     {request{method: "POST", target: "/locks/x", headers: bearer(keyA + "x")}, "unauthorized", `Bearer realm="redlockd", error="invalid_token"`},
		"empty bearer":          {request{method: "POST", target: "/locks/x", headers: []string{"Authorization", "Bearer "}}, "unauthorized", `Bearer realm="redlockd", error="invalid_token"`},
		"basic scheme":          {request{method: "POST", target: "/locks/x", headers: []string{"Authorization", "Basic " + keyA}}, "unauthorized", `Bearer realm="redlockd", error="invalid_token"`},
		"key alone":             {request{method: "POST", target: "/locks/x", headers: []string{"Authorization", keyA}}, "unauthorized", `Bearer realm="redlockd", error="invalid_token"`},
		"two headers":           {request{method: "POST", target: "/locks/x", headers: append(bearer(keyA), bearer(keyA)...)}, "unauthorized", `Bearer realm="redlockd", error="invalid_token"`},
		"no key, bad body":      {request{method: "POST", target: "/locks/x", body: "{"}, "unauthorized", `Bearer realm="redlockd"`},
		"no key, huge body":     {request{method: "POST", target: "/locks/x", body: strings.Repeat(" ", 17<<10)}, "unauthorized", `Bearer realm="redlockd"`},
		"no key, bad resource":  {request{method: "GET", target: "/locks/a%2Fb"}, "unauthorized", `Bearer realm="redlockd"`},
		"no key, no token":      {request{method: "DELETE", target: "/locks/x"}, "unauthorized", `Bearer realm="redlockd"`},
		"no key, wrong method":  {request{method: "PUT", target: "/locks/x"}, "unauthorized", `Bearer realm="redlockd"`},
		"no key, /locks":        {request{method: "GET", target: "/locks"}, "unauthorized", `Bearer realm="redlockd"`},
		"acquire":               {request{method: "POST", target: "/locks/x", headers: bearer(keyA)}, "", ""},
		"lower-case scheme":     {request{method: "POST", target: "/locks/x", headers: []string{"Authorization", "bearer " + keyB}}, "", ""},
		"extend":                {request{method: "PATCH", target: "/locks/x", headers: append(bearer(keyA), "Lock-Token", tokenA)}, "", ""},
		"release":               {request{method: "DELETE", target: "/locks/x", headers: append(bearer(keyB), "Lock-Token", tokenA)}, "", ""},
		"inspect":               {request{method: "GET", target: "/locks/x", headers: bearer(keyA)}, "", ""},
		"good key, bad request": {request{method: "POST", target: "/locks/x", body: "{", headers: bearer(keyA)}, "invalid-request", ""},
		"healthz needs no key":  {request{method: "GET", target: "/healthz"}, "", ""},
		"readyz needs no key":   {request{method: "GET", target: "/readyz"}, "", ""},
		"metrics open":          {request{method: "GET", target: "/metrics"}, "", ""},
		"openapi needs no key":  {request{method: "GET", target: "/openapi.yaml"}, "", ""},
		"unknown path":          {request{method: "GET", target: "/nope"}, "not-found", ""},
	} {
		t.Run(name, func(t *testing.T) {
			w := serve(t, h, tc.req)
			if tc.want == "" {
				if w.Code >= 300 {
					t.Fatalf("got %d %s", w.Code, w.Body)
				}
				return
			}
			status := map[string]int{"unauthorized": 401, "invalid-request": 400, "not-found": 404}[tc.want]
			checkProblem(t, w, status, tc.want)
			if got := w.Header().Get("WWW-Authenticate"); got != tc.auth {
				t.Errorf("WWW-Authenticate: got %q, want %q", got, tc.auth)
			}
		})
	}
	// Each key reached its own namespace only: 3 calls for a, 2 for b.
	count := map[string]int{}
	for _, ns := range namespaces {
		count[ns]++
	}
	if count["ns-a"] != 3 || count["ns-b"] != 2 || len(count) != 2 {
		t.Errorf("namespaces seen by the Locker: %v", count)
	}
	logs := log.String()
	for _, secret := range []string{keyA, keyB, "nope"} {
		if strings.Contains(logs, secret) {
			t.Errorf("%q in the logs", secret)
		}
	}
	if !strings.Contains(logs, `"key":"a"`) || !strings.Contains(logs, `"route":"/locks/{resource}","resource":"x","status":401`) {
		t.Errorf("the access log names neither the key nor the route of a 401:\n%s", logs)
	}
}

// TestAuthNamespaces checks that the same resource in two namespaces is two
// locks, with a Locker that keeps locks by namespace and resource.
func TestAuthNamespaces(t *testing.T) {
	held := map[string]bool{}
	f := newFake(t)
	f.AcquireFn = func(_ context.Context, resource string, o redlock.AcquireOptions) (redlock.Lock, error) {
		k := o.Namespace + "/" + resource
		if held[k] {
			return redlock.Lock{}, &redlock.HeldError{Remaining: time.Second}
		}
		held[k] = true
		return testLock(resource, tokenA, o.TTL), nil
	}
	f.InspectFn = func(_ context.Context, namespace, resource string) (redlock.Info, error) {
		if !held[namespace+"/"+resource] {
			return redlock.Info{}, redlock.ErrNotHeld
		}
		return redlock.Info{Resource: resource}, nil
	}
	h := newAuthHandler(t, f, nil, nil)
	auth := func(key string) []string { return []string{"Authorization", "Bearer " + key} }

	decode[map[string]any](t, serve(t, h, request{method: "POST", target: "/locks/job", headers: auth(keyA)}), 201)
	if got := decode[map[string]any](t, serve(t, h, request{method: "GET", target: "/locks/job", headers: auth(keyB)}), 200); got["held"] != false {
		t.Errorf("namespace B sees A's lock: %v", got)
	}
	decode[map[string]any](t, serve(t, h, request{method: "POST", target: "/locks/job", headers: auth(keyB)}), 201)
	checkProblem(t, serve(t, h, request{method: "POST", target: "/locks/job", headers: auth(keyA)}), 409, "lock-held")
	checkProblem(t, serve(t, h, request{method: "POST", target: "/locks/job", headers: auth(keyB)}), 409, "lock-held")
	if len(held) != 2 || !held["ns-a/job"] || !held["ns-b/job"] {
		t.Errorf("locks: %v", held)
	}
}

func TestMetricsAuth(t *testing.T) {
	f := newFake(t)
	f.StatusFn = func(context.Context) []redlock.NodeStatus { return nil }
	h := newAuthHandler(t, f, nil, func(c *Config) { c.Metrics, c.MetricsAuth = NewMetrics(), true })
	checkProblem(t, serve(t, h, request{method: "GET", target: "/metrics"}), 401, "unauthorized")
	if w := serve(t, h, request{method: "GET", target: "/metrics", headers: []string{"Authorization", "Bearer " + keyB}}); w.Code != 200 {
		t.Fatalf("with a key: %d %s", w.Code, w.Body)
	}
	if w := serve(t, h, request{method: "GET", target: "/healthz"}); w.Code != 200 {
		t.Fatalf("healthz: %d", w.Code)
	}
}

// TestKeysLookup checks the constant-time lookup finds every key, whatever
// its place, and nothing else.
func TestKeysLookup(t *testing.T) {
	var entries []string
	for i := range 5 {
		entries = append(entries, `{"name":"k`+string(rune('0'+i))+`","namespace":"n`+string(rune('0'+i))+`","sha256":"`+HashKey("key"+string(rune('0'+i)))+`"}`)
	}
	k, err := ParseKeys([]byte(`{"keys":[` + strings.Join(entries, ",") + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		e, ok := k.lookup("key" + string(rune('0'+i)))
		if !ok || e.namespace != "n"+string(rune('0'+i)) {
			t.Errorf("key%d: %+v %v", i, e, ok)
		}
	}
	for _, bad := range []string{"", "key", "key5", "key0 "} {
		if e, ok := k.lookup(bad); ok {
			t.Errorf("%q found %+v", bad, e)
		}
	}
	var none *Keys
	if _, ok := none.lookup("x"); ok || none.Len() != 0 {
		t.Error("nil Keys found a key")
	}
}

// FuzzParseKeys parses arbitrary keys files: no panic; a file it accepts has
// keys whose names and namespaces are valid, and the file itself is no key.
func FuzzParseKeys(f *testing.F) {
	h := HashKey("k")
	f.Add(`{"keys":[{"name":"ci","namespace":"ci","sha256":"` + h + `"}]}`)
	f.Add(`{"keys":[{"name":"a","namespace":"x","sha256":"` + h + `"},{"name":"a","namespace":"x","sha256":"` + h + `"}]}`)
	f.Add(`{"keys":[{"name":"a","namespace":"a","sha256":"SeCrEt"}]}`)
	f.Add(`{"keys":[]}`)
	f.Add(`{"keys":null} x`)
	f.Fuzz(func(t *testing.T, file string) {
		k, err := ParseKeys([]byte(file))
		if err != nil {
			if k != nil {
				t.Fatal("keys and an error")
			}
			return
		}
		if k.Len() == 0 {
			t.Fatal("no keys and no error")
		}
		for _, e := range k.set() {
			if !redlock.ValidName(e.name) || !redlock.ValidName(e.namespace) {
				t.Fatalf("invalid entry accepted: %+v", e)
			}
		}
		if _, ok := k.lookup(file); ok {
			t.Fatal("the file itself is a key")
		}
	})
}
