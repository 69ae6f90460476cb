package tests

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redlockd/redlockd/internal/redistest"
)

// exampleClient is one of the examples in ../examples: cmd returns the
// command that takes resource (ttl, wait in ms), works for work ms
// appending "enter ID FENCE" and "exit ID" to journal, and releases.
type exampleClient struct {
	name string
	cmd  func(t *testing.T, url, resource, journal string, ttl, wait, work int) *exec.Cmd
	// holding is the start of the line the command prints once it holds
	// the lock.
	holding string
}

// examplePath is the absolute path of a file under ../examples.
func examplePath(t *testing.T, rel string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "examples", rel))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// withURL returns cmd with REDLOCKD_URL=url added to the clean environment.
func withURL(cmd *exec.Cmd, url string, env ...string) *exec.Cmd {
	cmd.Env = append(append(cleanEnv(), "REDLOCKD_URL="+url), env...)
	return cmd
}

var exampleClients = []exampleClient{
	{"Shell", func(t *testing.T, url, res, journal string, ttl, wait, work int) *exec.Cmd {
		needTool(t, "curl")
		// The work stops on SIGTERM (the script's answer to a lost lock).
		script := fmt.Sprintf(`echo "enter sh-$$ $REDLOCKD_FENCING_TOKEN" >> "$JOURNAL"; echo "lock: holding"; `+
			`trap 'kill $!; exit 143' TERM; sleep %d.%03d & wait $!; echo "exit sh-$$" >> "$JOURNAL"`, work/1000, work%1000)
		return withURL(exec.Command(examplePath(t, "shell/with-lock.sh"), res, "sh", "-c", script), url,
			fmt.Sprintf("LOCK_TTL_MS=%d", ttl), fmt.Sprintf("LOCK_WAIT_MS=%d", wait), "JOURNAL="+journal)
	}, "lock: holding"},
	{"Python", func(t *testing.T, url, res, journal string, ttl, wait, work int) *exec.Cmd {
		return withURL(exec.Command(needTool(t, "python3"), examplePath(t, "python/lock.py"), res,
			"--ttl-ms", fmt.Sprint(ttl), "--wait-ms", fmt.Sprint(wait), "--work-ms", fmt.Sprint(work), "--journal", journal), url)
	}, "lock: holding"},
	{"Node", func(t *testing.T, url, res, journal string, ttl, wait, work int) *exec.Cmd {
		return withURL(exec.Command(needTool(t, "node"), examplePath(t, "node/lock.mjs"), res,
			"--ttl-ms", fmt.Sprint(ttl), "--wait-ms", fmt.Sprint(wait), "--work-ms", fmt.Sprint(work), "--journal", journal), url)
	}, "lock: holding"},
	{"Serverless", func(t *testing.T, url, res, journal string, ttl, wait, work int) *exec.Cmd {
		return withURL(exec.Command(needTool(t, "node"), examplePath(t, "serverless/handler.mjs"),
			serverlessEvent(t, strings.TrimPrefix(res, "account-"), fmt.Sprintf("evt-%d", seq.Add(1)), journal, ttl, wait, work)),
			url, "LOCK_TOKEN_SECRET="+serverlessSecret)
	}, "lock: holding"},
}

const serverlessSecret = "test-secret"

// serverlessEvent is the JSON event of examples/serverless/handler.mjs; it
// locks "account-" + account.
func serverlessEvent(t *testing.T, account, id, journal string, ttl, wait, work int) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"id": id, "account": account, "journal": journal,
		"ttl_ms": ttl, "wait_ms": wait, "work_ms": work})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestExamples: each example of ../examples (shell + curl, Python, Node, a
// serverless handler) holds the lock safely and exits with the statuses of
// `redlockd run`: two instances take turns, never both inside, each
// extending; 75 while another owner holds the lock; 76 when the lock is lost
// during the work, which stops; 64 for a name the gateway refuses or a wrong
// API key; 69 when the gateway is unreachable; a right API key works
// (docs/clients.md "Using redlockd from shell, Python, Node, Go and
// serverless functions"). python3, node and curl are required: a missing one
// fails the test.
func TestExamples(t *testing.T) {
	t.Parallel()
	redistest.Slow(t)
	nodes := startCluster(t, 3)
	g := startGateway(t, nodes)
	key := keygen(t, "examples", "examples")
	authed := startGateway(t, nodes, "--api-keys-file", keysFile(t, key))
	for _, c := range exampleClients {
		t.Run(c.name, func(t *testing.T) {
			// Two instances at once, each working longer than the TTL: they
			// take turns (one waits), never both inside, and each extends.
			// TTL 3 s: an extension every second, and a starved shell still
			// gets one through within the validity.
			t.Run("Contention", func(t *testing.T) {
				res, journal := "account-"+resourceName(t), filepath.Join(t.TempDir(), "journal")
				var ps []*proc
				for range 2 {
					ps = append(ps, startProc(t, c.cmd(t, g.URL, res, journal, 3000, 30000, 4000)))
				}
				for _, p := range ps {
					p.wantExit(0, 60*time.Second)
				}
				checkJournal(t, journal, 2)
				wantNotHeld(t, inspectAnswered(t, g, res))
			})

			// While another owner holds the lock, an instance that does not
			// wait fails cleanly (75) without working.
			t.Run("Held", func(t *testing.T) {
				res, journal := "account-"+resourceName(t), filepath.Join(t.TempDir(), "journal")
				held := lock(t, g, res, `{"ttl_ms":30000}`)
				p := startProc(t, c.cmd(t, g.URL, res, journal, 5000, 0, 100))
				p.wantExit(runLockHeld, 30*time.Second)
				wantNoFile(t, journal, "lock held")
				if !strings.Contains(p.errs.String(), "held") {
					t.Errorf("stderr %q does not say the lock is held", p.errs.String())
				}
				wantStatus(t, release(t, g, res, held.str(t, "token")), http.StatusNoContent)
			})

			// The lock's keys vanish (FLUSHALL) during the work: the next
			// extension is refused, the work stops, the exit status is 76.
			t.Run("Lost", func(t *testing.T) {
				res, journal := "account-"+resourceName(t), filepath.Join(t.TempDir(), "journal")
				p := startProc(t, c.cmd(t, g.URL, res, journal, 3000, 0, 20000))
				p.waitLinePrefix(c.holding, 30*time.Second)
				for _, n := range nodes {
					if err := n.Client().FlushAll(context.Background()).Err(); err != nil {
						t.Fatal(err)
					}
				}
				p.wantExit(runLockLost, 15*time.Second)
				if b, _ := os.ReadFile(journal); strings.Contains(string(b), "exit") {
					t.Errorf("the work went on to its end after the lock was lost:\n%s", b)
				}
				if !strings.Contains(p.errs.String(), "lost") {
					t.Errorf("stderr %q does not say the lock was lost", p.errs.String())
				}
			})

			// A resource name the gateway refuses is a configuration error
			// (64), whatever the URL makes of it: "#" must not cut it to
			// another lock's name, a space must not read as "unreachable".
			t.Run("BadResource", func(t *testing.T) {
				base := "account-" + resourceName(t)
				for _, res := range []string{base + "#1", base + " 1", base + "?x=1"} {
					journal := filepath.Join(t.TempDir(), "journal")
					startProc(t, c.cmd(t, g.URL, res, journal, 5000, 0, 100)).wantExit(runUsage, 30*time.Second)
					wantNoFile(t, journal, "bad resource "+res)
				}
				wantNotHeld(t, inspectAnswered(t, g, base))
			})

			t.Run("Unreachable", func(t *testing.T) {
				res, journal := "account-"+resourceName(t), filepath.Join(t.TempDir(), "journal")
				p := startProc(t, c.cmd(t, closedURL(t), res, journal, 5000, 0, 100))
				p.wantExit(runUnavailable, 30*time.Second)
				wantNoFile(t, journal, "gateway unreachable")
			})

			// With an API keys file, the example sends $REDLOCKD_API_KEY:
			// the right key works; a wrong one (401) is a configuration
			// error, 64 at once, not "unavailable" (69) to be retried.
			t.Run("APIKey", func(t *testing.T) {
				res, journal := "account-"+resourceName(t), filepath.Join(t.TempDir(), "journal")
				cmd := c.cmd(t, authed.URL, res, journal, 5000, 0, 100)
				cmd.Env = append(cmd.Env, "REDLOCKD_API_KEY="+key.Key)
				startProc(t, cmd).wantExit(0, 30*time.Second)
				checkJournal(t, journal, 1)
			})
			t.Run("BadAPIKey", func(t *testing.T) {
				res, journal := "account-"+resourceName(t), filepath.Join(t.TempDir(), "journal")
				cmd := c.cmd(t, authed.URL, res, journal, 5000, 0, 100)
				cmd.Env = append(cmd.Env, "REDLOCKD_API_KEY=not-a-key-0123456789abcdefghijkl")
				p := startProc(t, cmd)
				p.wantExit(runUsage, 30*time.Second)
				wantNoFile(t, journal, "bad API key")
				if !strings.Contains(p.errs.String(), "401") {
					t.Errorf("stderr %q does not give the gateway's answer (401)", p.errs.String())
				}
				if c.name == "Serverless" {
					if code, body := handlerResult(t, p); code == http.StatusOK || body["retry"] != false {
						t.Errorf("handler result %d %v, want a failure with retry false", code, body)
					}
				}
			})
		})
	}
}

// TestExamplesServerlessRetry: when a platform retries an event whose first
// invocation died holding the lock, the retry derives the same token from the
// event id, so it gets the lock at once with the same fencing token instead
// of waiting for the TTL; another event does not get it (docs/clients.md
// "Serverless functions").
func TestExamplesServerlessRetry(t *testing.T) {
	t.Parallel()
	node := needTool(t, "node")
	g := startGateway(t, startCluster(t, 3))
	account, id := resourceName(t), "evt-retried"
	res := "account-" + account
	mac := hmac.New(sha256.New, []byte(serverlessSecret))
	mac.Write([]byte(res + "\n" + id))
	token := base64.RawURLEncoding.EncodeToString(mac.Sum(nil))

	// The first invocation: it took the lock, then the platform lost it.
	first := lock(t, g, res, fmt.Sprintf(`{"ttl_ms":60000,"token":%q}`, token))

	invoke := func(id string, wait int) *proc {
		journal := filepath.Join(t.TempDir(), "journal")
		return startProc(t, withURL(exec.Command(node, examplePath(t, "serverless/handler.mjs"),
			serverlessEvent(t, account, id, journal, 30000, wait, 100)), g.URL, "LOCK_TOKEN_SECRET="+serverlessSecret))
	}
	// Another event cannot take the lock meanwhile.
	invoke("evt-other", 0).wantExit(runLockHeld, 30*time.Second)

	retry := invoke(id, 0)
	retry.wantExit(0, 30*time.Second)
	var out struct {
		StatusCode int
		Body       string
	}
	lines := strings.Split(strings.TrimSpace(retry.out.String()), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &out); err != nil {
		t.Fatalf("handler output %q: %v", retry.out.String(), err)
	}
	var body struct {
		FencingToken int64 `json:"fencing_token"`
	}
	if err := json.Unmarshal([]byte(out.Body), &body); err != nil || out.StatusCode != 200 {
		t.Fatalf("handler result %+v: %v", out, err)
	}
	if want := first.num(t, "fencing_token"); body.FencingToken != want {
		t.Errorf("the retry got fencing token %d, want the first invocation's %d", body.FencingToken, want)
	}
	// The retry finished the work and released the lock.
	wantNotHeld(t, inspectAnswered(t, g, res))
}

// handlerResult is the result that examples/serverless/handler.mjs printed
// on its last line: the status code and the decoded body.
func handlerResult(t testing.TB, p *proc) (int, map[string]any) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(p.out.String()), "\n")
	var out struct {
		StatusCode int
		Body       string
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &out); err != nil {
		t.Fatalf("handler output %q: %v", p.out.String(), err)
	}
	var body map[string]any
	if err := json.Unmarshal([]byte(out.Body), &body); err != nil {
		t.Fatalf("handler result body %q: %v", out.Body, err)
	}
	return out.StatusCode, body
}

// TestExamplesServerlessEventID: an event without an id is refused (400,
// retry false) without taking the lock: the handler derives its lock token
// from the id, so two such events would share one token (the second would
// "re-acquire" the first's lock with the same fencing token); two events with
// ids get two tokens (docs/clients.md "Serverless functions").
func TestExamplesServerlessEventID(t *testing.T) {
	t.Parallel()
	node := needTool(t, "node")
	nodes := startCluster(t, 3)
	g := startGateway(t, nodes)
	invoke := func(event string) *proc {
		return startProc(t, withURL(exec.Command(node, examplePath(t, "serverless/handler.mjs"), event),
			g.URL, "LOCK_TOKEN_SECRET="+serverlessSecret))
	}
	for name, id := range map[string]string{"missing": ``, "empty": `"id":"",`, "null": `"id":null,`, "number": `"id":7,`, "object": `"id":{},`} {
		t.Run(name, func(t *testing.T) {
			account := resourceName(t)
			journal := filepath.Join(t.TempDir(), "journal")
			p := invoke(fmt.Sprintf(`{%s"account":%q,"journal":%q,"work_ms":100}`, id, account, journal))
			p.wantExit(runUsage, 30*time.Second)
			if code, body := handlerResult(t, p); code != http.StatusBadRequest || body["retry"] != false {
				t.Errorf("handler result %d %v, want 400 with retry false", code, body)
			}
			wantNoFile(t, journal, "event without an id")
			for i, n := range nodes {
				if h := lockHolder(t, n.Client(), lockKey("account-"+account)); h != "" {
					t.Errorf("node %d: the lock is held by %s: the event took the lock", i, h)
				}
			}
		})
	}

	// Two events with ids: two tokens (base64url HMAC-SHA256, 43 characters).
	out, err := exec.Command(node, "--input-type=module", "-e", fmt.Sprintf(
		`const { tokenFor } = await import(%q); console.log(tokenFor("account-1", "evt-a"), tokenFor("account-1", "evt-b"))`,
		examplePath(t, "serverless/handler.mjs"))).Output()
	if err != nil {
		t.Fatal(err)
	}
	tokens := strings.Fields(string(out))
	if len(tokens) != 2 || tokens[0] == tokens[1] || !tokenPattern.MatchString(tokens[0]) || !tokenPattern.MatchString(tokens[1]) {
		t.Errorf("tokens of two events %q: want two different tokens of 22-128 [A-Za-z0-9_-]", tokens)
	}
}

var tokenPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{22,128}$`)

// TestExamplesUsage: the demos refuse a TTL or wait that is not whole
// milliseconds with 64, the usage error of `redlockd run`'s statuses, before
// any request (their URL answers nothing, so a request would end in 69)
// (docs/clients.md "`redlockd run` (shell scripts, cron jobs)").
func TestExamplesUsage(t *testing.T) {
	t.Parallel()
	needTool(t, "curl")
	url, res := closedURL(t), resourceName(t)
	for _, v := range [][2]string{{"30000", "abc"}, {"30000", "-1"}, {"1.5", "0"}, {"3s", "0"}} {
		for _, cmd := range []*exec.Cmd{
			exec.Command(examplePath(t, "shell/with-lock.sh"), res, "true"),
			exec.Command(needTool(t, "python3"), examplePath(t, "python/lock.py"), res, "--ttl-ms", v[0], "--wait-ms", v[1]),
			exec.Command(needTool(t, "node"), examplePath(t, "node/lock.mjs"), res, "--ttl-ms", v[0], "--wait-ms", v[1]),
		} {
			startProc(t, withURL(cmd, url, "LOCK_TTL_MS="+v[0], "LOCK_WAIT_MS="+v[1])).wantExit(runUsage, 30*time.Second)
		}
	}
}

// TestExamplesShellOutputEnds: the output of examples/shell/with-lock.sh
// (docs/clients.md "Shell with curl") ends when it exits, so that
// out=$(with-lock.sh ...) returns at once: no sleep of its extension loop
// outlives it holding the output open for up to ttl/3. The TTL makes that
// sleep 100s, so that a loaded machine's slow shell, curl and gateway, which
// took 11s once under scripts/load.sh, cannot be mistaken for it.
func TestExamplesShellOutputEnds(t *testing.T) {
	t.Parallel()
	needTool(t, "curl")
	const ttl = 300 * time.Second
	g := startGateway(t, startCluster(t, 3), "--max-ttl", ttl.String())
	cmd := withURL(exec.Command(examplePath(t, "shell/with-lock.sh"), resourceName(t), "echo", "worked"), g.URL,
		fmt.Sprintf("LOCK_TTL_MS=%d", ttl.Milliseconds()))
	start := time.Now()
	out, err := cmd.Output() // waits until every holder of stdout closed it
	if err != nil || string(out) != "worked\n" {
		t.Fatalf("with-lock.sh: %q, %v", out, err)
	}
	if took := time.Since(start); took > ttl/3/2 {
		t.Errorf("with-lock.sh's output ended %v after it started, want at once (the extension loop sleeps ttl/3 = %v)", took, ttl/3)
	}
}
