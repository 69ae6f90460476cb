package tests

import (
	"bytes"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// firstSteps returns the shell blocks of the README's first steps (between
// <!-- first-steps --> and <!-- /first-steps -->), in order, as one script.
func firstSteps(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok1 := strings.Cut(string(b), "<!-- first-steps -->")
	steps, _, ok2 := strings.Cut(rest, "<!-- /first-steps -->")
	if !ok1 || !ok2 {
		t.Fatal("README.md has no <!-- first-steps --> ... <!-- /first-steps --> section")
	}
	blocks := regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(steps, -1)
	if len(blocks) == 0 {
		t.Fatal("the README's first steps hold no ```sh block")
	}
	var script strings.Builder
	for _, b := range blocks {
		script.WriteString(b[1])
	}
	return script.String()
}

// TestReadmeFirstSteps: the README's first steps (README.md "Using it"),
// pasted in order into bash against a live gateway (its address in place of
// localhost:8080, the built redlockd on PATH, the repository as working
// directory), print what each step promises: the status, the token
// captured from the acquire used by the extend and release, the exit
// statuses of `redlockd run` and with-lock.sh. No step waits: every acquire
// is decided in its first round (an acquire that waited for a lock still
// held would send more rounds, up to its whole wait_ms).
//
// The free lock's inspect is the 200 {"held":false} answer (openapi.yaml
// GET /locks/{resource}); a gateway that answers 404 for a free lock fails
// this test.
func TestReadmeFirstSteps(t *testing.T) {
	t.Parallel()
	bash, _ := needTool(t, "bash"), needTool(t, "curl")
	if buildErr != nil {
		t.Fatalf("redlockd binary not built: %v", buildErr)
	}
	g := startGateway(t, startCluster(t, 3))
	u, err := url.Parse(g.URL)
	if err != nil {
		t.Fatal(err)
	}
	script := firstSteps(t)
	if !strings.Contains(script, "localhost:8080") {
		t.Fatal("the first steps do not name localhost:8080")
	}
	script = strings.ReplaceAll(script, "localhost:8080", u.Host)

	cmd := exec.Command(bash, "-c", script)
	cmd.Dir = ".."
	cmd.Env = append(cleanEnv(), "PATH="+filepath.Dir(binPath)+string(os.PathListSeparator)+os.Getenv("PATH"), "REDLOCKD_URL="+g.URL)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	before := scrapeMetrics(t, g)
	err = cmd.Run()
	lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	defer func() {
		if t.Failed() {
			t.Logf("script:\n%s\nstdout:\n%s\nstderr:\n%s", script, stdout.String(), stderr.String())
		}
	}()
	if err != nil {
		t.Fatalf("bash: %v", err)
	}
	after := scrapeMetrics(t, g)
	rounds := after.value("redlockd_acquire_rounds_total") - before.value("redlockd_acquire_rounds_total")
	acquires := after.value("redlockd_acquisitions_total") - before.value("redlockd_acquisitions_total")
	if acquires == 0 || rounds != acquires {
		t.Errorf("the first steps sent %v acquires in %v rounds: a step waited", acquires, rounds)
	}

	type answer struct {
		Resource     string
		Token        string
		FencingToken int64 `json:"fencing_token"`
		TTL          int64 `json:"ttl_ms"`
		Validity     int64 `json:"validity_ms"`
		Held         *bool
		Owner        string
		Type         string
		Status       int
	}
	steps := []struct {
		name  string
		check func(line string, a answer) bool
	}{
		{"acquire: 201", func(_ string, a answer) bool {
			return a.Resource == "demo" && a.Token != "" && a.FencingToken > 0 && a.Validity > 0
		}},
		{"acquire again: 409 lock-held", func(_ string, a answer) bool {
			return a.Status == 409 && a.Type == "urn:redlockd:problem:lock-held"
		}},
		{"extend with $TOKEN: 200", func(_ string, a answer) bool { return a.Token != "" && a.Validity > 0 && a.TTL == 30000 }},
		{"inspect: held", func(_ string, a answer) bool { return a.Held != nil && *a.Held && a.FencingToken > 0 }},
		{"release with $TOKEN: 204", func(l string, _ answer) bool { return l == "204" }},
		{"inspect a free lock: 200 held false", func(_ string, a answer) bool { return a.Held != nil && !*a.Held }},
		{"acquire with options: 201 at once", func(_ string, a answer) bool { return a.Token != "" && a.TTL == 60000 }},
		{"redlockd run: the command runs", func(l string, _ answer) bool { return strings.HasPrefix(l, "working with fencing token ") }},
		{"redlockd run: exit 0", func(l string, _ answer) bool { return l == "exit status 0" }},
		{"redlockd run, lock held: exit 75", func(l string, _ answer) bool { return l == "exit status 75" }},
		{"with-lock.sh: the command runs", func(l string, _ answer) bool { return strings.HasPrefix(l, "working with fencing token ") }},
		{"with-lock.sh: exit 0", func(l string, _ answer) bool { return l == "exit status 0" }},
	}
	if len(lines) != len(steps) {
		t.Fatalf("the first steps printed %d lines, want %d", len(lines), len(steps))
	}
	var token string
	for i, s := range steps {
		var a answer
		if strings.HasPrefix(lines[i], "{") {
			if err := json.Unmarshal([]byte(lines[i]), &a); err != nil {
				t.Errorf("step %q printed %q: %v", s.name, lines[i], err)
				continue
			}
		}
		if !s.check(lines[i], a) {
			t.Errorf("step %q printed %q", s.name, lines[i])
		}
		switch {
		case i == 0:
			token = a.Token
		case i == 2 && a.Token != token:
			t.Errorf("the extend answered for token %q, want the acquire's %q", a.Token, token)
		}
	}
}
