package tests

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// docACL returns the rules of the `ACL SETUSER redlockd on >PASSWORD …` line
// of docs/safety.md, after the password.
func docACL(t testing.TB) []any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "docs", "safety.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?m)^ *ACL SETUSER redlockd on >PASSWORD (.+)$").FindSubmatch(b)
	if m == nil {
		t.Fatal("docs/safety.md documents no ACL SETUSER redlockd line")
	}
	var rules []any
	for _, f := range strings.Fields(string(m[1])) {
		rules = append(rules, f)
	}
	return rules
}

// aclUser makes the user redlockd with password and the ACL rules on n, and
// returns n's URL for that user.
func aclUser(t testing.TB, n *RedisNode, password string, rules []any) string {
	t.Helper()
	args := append([]any{"ACL", "SETUSER", "redlockd", "on", ">" + password}, rules...)
	if err := n.Client().Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("%s: %v", n.Addr, err)
	}
	return (&url.URL{Scheme: "redis", User: url.UserPassword("redlockd", password), Host: n.Addr}).String()
}

// TestRedisMinimalACL: the smallest Redis ACL of docs/safety.md ("Guarantees
// and limits, in plain words", Keys), given to a user whose password needs
// percent-encoding, runs every kind of lock (acquire, inspect, extend,
// release, a waiting acquire woken by the release), GET /locks and /readyz.
// Two API keys of two namespaces each take the same names and do not see,
// extend or release each other's locks, even with the token (openapi.yaml
// "Authentication and namespaces"). The password, the keys and the tokens
// appear in no log line (debug level), metrics or /readyz
// (docs/operations.md "Security").
func TestRedisMinimalACL(t *testing.T) {
	t.Parallel()
	const password = "Pw@ss/w:rd%acl-secret"
	acl := docACL(t)
	nodes := startCluster(t, 3)
	urls := make([]string, len(nodes))
	for i, n := range nodes {
		urls[i] = aclUser(t, n, password, acl)
	}
	a, b := keygen(t, "qa-a", "qa-a"), keygen(t, "qa-b", "qa-b")
	gw := startServe(t, urls, "--api-keys-file", keysFile(t, a, b), "--log-level", "debug")
	gw.waitReady(t)
	secrets := []string{password, url.QueryEscape(password), a.Key, b.Key}

	inspectURL := map[string]string{"lock": "/locks/", "read": "/locks/", "multi": "/locks/", "semaphore": "/semaphores/"}
	for _, k := range lockKinds {
		t.Run(k.name, func(t *testing.T) {
			res := resourceName(t) + ":..:-"
			ra := gw.do(t, http.MethodPost, k.acquireURL(res), k.body(res, `,"ttl_ms":30000`), bearer(a.Key)...)
			wantStatus(t, ra, http.StatusCreated)
			tokA := ra.str(t, "token")
			secrets = append(secrets, tokA)
			// Key b: the same name is another lock, and a's token reaches nothing.
			rb := gw.do(t, http.MethodPost, k.acquireURL(res), k.body(res, ""), bearer(b.Key)...)
			wantStatus(t, rb, http.StatusCreated)
			secrets = append(secrets, rb.str(t, "token"))
			for _, m := range []string{http.MethodPatch, http.MethodDelete} {
				r := gw.do(t, m, k.url(res), "", append(bearer(b.Key), "Lock-Token", tokA)...)
				wantProblem(t, r, http.StatusConflict, "not-owner")
			}
			wantStatus(t, gw.do(t, http.MethodDelete, k.url(res), "", append(bearer(b.Key), "Lock-Token", rb.str(t, "token"))...), http.StatusNoContent)
			if r := gw.do(t, http.MethodGet, inspectURL[k.name]+res, "", bearer(b.Key)...); r.Status != http.StatusOK || !strings.Contains(string(r.Body), `"held":false`) && !strings.Contains(string(r.Body), `"held":0`) {
				t.Errorf("key b inspects a's lock: %s", r)
			}
			if r := gw.do(t, http.MethodGet, "/locks?prefix="+res, "", bearer(b.Key)...); r.Status != http.StatusOK || strings.Contains(string(r.Body), res) {
				t.Errorf("key b lists a's lock: %s", r)
			}

			// Key a: inspect, list, extend, and a waiter woken by the release.
			if r := gw.do(t, http.MethodGet, inspectURL[k.name]+res, "", bearer(a.Key)...); r.Status != http.StatusOK || strings.Contains(string(r.Body), `"held":false`) || strings.Contains(string(r.Body), `"held":0`) {
				t.Errorf("key a inspects its lock: %s", r)
			}
			if k.name != "semaphore" {
				if r := gw.do(t, http.MethodGet, "/locks?prefix="+res, "", bearer(a.Key)...); r.Status != http.StatusOK || !strings.Contains(string(r.Body), res) {
					t.Errorf("key a lists its lock: %s", r)
				}
			}
			wantStatus(t, gw.do(t, http.MethodPatch, k.url(res), "", append(bearer(a.Key), "Lock-Token", tokA)...), http.StatusOK)
			waiter := k
			if k.name == "read" {
				waiter = lockKinds[0] // a writer waits for the reader
			}
			done := make(chan *Resp, 1)
			go func() {
				r, _ := gw.try(http.MethodPost, waiter.acquireURL(res), waiter.body(res, `,"wait_ms":20000`), bearer(a.Key)...)
				done <- r
			}()
			eventually(t, 5*time.Second, "the acquire waits", func() bool {
				return scrapeMetrics(t, gw).value("redlockd_waiters") == 1
			})
			wantStatus(t, gw.do(t, http.MethodDelete, k.url(res), "", append(bearer(a.Key), "Lock-Token", tokA)...), http.StatusNoContent)
			select {
			case r := <-done:
				if r == nil || r.Status != http.StatusCreated {
					t.Fatalf("the waiter got %v", r)
				}
				secrets = append(secrets, r.str(t, "token"))
			case <-time.After(5 * time.Second):
				t.Fatal("the release did not wake the waiting acquire within 5s (no release announcement?)")
			}
		})
	}

	r := gw.do(t, http.MethodGet, "/readyz", "", bearer(a.Key)...)
	wantStatus(t, r, http.StatusOK)
	seen := string(r.Body) + string(scrapeMetrics(t, gw).text)
	gw.Stop()
	checkNoSecrets(t, seen, "/readyz or /metrics", secrets...)
	checkNoSecrets(t, gw.Stderr(), "stderr", secrets...)
}

// TestRedisACLSubscribeRefused: a node whose ACL (docs/safety.md's without
// +subscribe) refuses the subscription to release announcements is logged
// at start-up, by node, without the password, since releases then wake no
// waiter through it (docs/safety.md "Guarantees and limits, in plain
// words", Keys).
func TestRedisACLSubscribeRefused(t *testing.T) {
	t.Parallel()
	const password = "no-subscribe-secret"
	var acl []any
	for _, r := range docACL(t) {
		if r != "+subscribe" {
			acl = append(acl, r)
		}
	}
	nodes := startCluster(t, 3)
	urls := strings.Split(redisURLs(nodes), ",")
	urls[1] = aclUser(t, nodes[1], password, acl)
	gw := startServe(t, urls)
	gw.waitReady(t)
	eventually(t, 5*time.Second, "the refused subscription logged", func() bool {
		return strings.Contains(gw.Stderr(), `"node":"`+nodes[1].Addr+`"`) && strings.Contains(gw.Stderr(), "refused the subscription to release announcements")
	})
	gw.Stop()
	checkNoSecrets(t, gw.Stderr(), "stderr", password)
	if n := strings.Count(gw.Stderr(), "refused the subscription"); n != 1 {
		t.Errorf("%d lines say a subscription was refused, want 1 (node %s only)", n, nodes[1].Addr)
	}
}
