package tests

import (
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.yaml.in/yaml/v3"

	"github.com/redlockd/redlockd/internal/redistest"
)

// compose is the part of docker-compose.yml the test reads.
type compose struct {
	Services map[string]struct {
		Build       any               `yaml:"build"`
		Image       string            `yaml:"image"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Volumes     []string          `yaml:"volumes"`
		Healthcheck map[string]any    `yaml:"healthcheck"`
	} `yaml:"services"`
	Volumes map[string]any `yaml:"volumes"`
}

// dockerfile is what the test reads from the Dockerfile.
type dockerfile struct {
	stages      int
	env         []string // KEY=value
	user        string
	healthcheck []string // the command, exec form
	entrypoint  []string
	cmd         []string
	build       string // the RUN line that builds the binary
}

// readDeployment parses docker-compose.yml and the Dockerfile at the module
// root.
func readDeployment(t *testing.T) (*compose, *dockerfile) {
	t.Helper()
	data, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	src, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	d := &dockerfile{}
	execForm := func(s string) []string {
		var v []string
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			t.Fatalf("Dockerfile: %q is not in exec form: %v", s, err)
		}
		return v
	}
	for line := range strings.Lines(string(src)) {
		line = strings.TrimSpace(line)
		word, rest, _ := strings.Cut(line, " ")
		switch word {
		case "FROM":
			d.stages++
		case "ENV":
			d.env = append(d.env, strings.Fields(rest)...)
		case "USER":
			d.user = rest
		case "HEALTHCHECK":
			_, cmd, ok := strings.Cut(rest, "CMD ")
			if !ok {
				t.Fatalf("Dockerfile: HEALTHCHECK without CMD: %q", line)
			}
			d.healthcheck = execForm(cmd)
		case "ENTRYPOINT":
			d.entrypoint = execForm(rest)
		case "CMD":
			d.cmd = execForm(rest)
		case "RUN":
			if strings.Contains(rest, "go build") {
				d.build = rest
			}
		}
	}
	return &c, d
}

// TestDeployment: docker-compose.yml and the Dockerfile deploy the topology
// that their comments and docs/operations.md "Topology" describe, and a fresh
// cluster of its durable nodes votes at once under restart quarantine auto
// (docs/operations.md "Restarts"); the image's HEALTHCHECK command passes
// while the gateway runs and fails once it stopped. There is no Docker engine
// here: the test reads both files against the binary, then runs the topology
// with processes: 5 independent redis-servers started with the compose file's
// command, each in its own directory as its volume, and the gateway started
// with the image's entrypoint and the compose file's environment, only
// addresses changed.
func TestDeployment(t *testing.T) {
	t.Parallel()
	c, d := readDeployment(t)

	// The Dockerfile: multi-stage, static, non-root, a health check that is
	// a real subcommand, serve by default.
	if d.stages < 2 || !strings.Contains(d.build, "CGO_ENABLED=0") || !strings.Contains(d.build, "./cmd/redlockd") {
		t.Errorf("Dockerfile: want a multi-stage build of a static ./cmd/redlockd; stages %d, build %q", d.stages, d.build)
	}
	if d.user == "" || strings.HasPrefix(d.user, "root") || strings.HasPrefix(d.user, "0") {
		t.Errorf("Dockerfile: USER %q, want a non-root user", d.user)
	}
	if len(d.entrypoint) != 1 || len(d.healthcheck) < 2 || d.healthcheck[0] != d.entrypoint[0] || d.healthcheck[1] != "probe" {
		t.Errorf("Dockerfile: ENTRYPOINT %q, HEALTHCHECK %q: want the binary's probe subcommand", d.entrypoint, d.healthcheck)
	}
	if !slices.Equal(d.cmd, []string{"serve"}) {
		t.Errorf("Dockerfile: CMD %q, want [serve]", d.cmd)
	}

	// The compose file: the gateway built from the Dockerfile, 5 Redis
	// masters with a volume each and no replication.
	gw, ok := c.Services["redlockd"]
	if !ok || gw.Build == nil {
		t.Fatalf("docker-compose.yml: no redlockd service built from the Dockerfile")
	}
	var redisNames []string
	volumes := map[string]string{}
	for name, s := range c.Services {
		if name == "redlockd" {
			continue
		}
		redisNames = append(redisNames, name)
		if !strings.HasPrefix(s.Image, "redis:") || len(s.Command) == 0 || s.Command[0] != "redis-server" {
			t.Errorf("service %s: image %q, command %q: want redis-server", name, s.Image, s.Command)
		}
		if len(s.Volumes) != 1 || !strings.HasSuffix(s.Volumes[0], ":/data") {
			t.Errorf("service %s: volumes %q, want one volume on /data", name, s.Volumes)
			continue
		}
		vol, _, _ := strings.Cut(s.Volumes[0], ":")
		if other, dup := volumes[vol]; dup {
			t.Errorf("services %s and %s share the volume %s", name, other, vol)
		}
		if _, declared := c.Volumes[vol]; !declared {
			t.Errorf("service %s: volume %s is not declared", name, vol)
		}
		volumes[vol] = name
		for _, a := range s.Command {
			if strings.Contains(strings.ToLower(a), "replicaof") || strings.Contains(strings.ToLower(a), "slaveof") {
				t.Errorf("service %s replicates: %q", name, s.Command)
			}
		}
		if !slices.Contains(s.Command, "--appendonly") || s.Healthcheck == nil {
			t.Errorf("service %s: command %q, healthcheck %v: want appendonly and a health check", name, s.Command, s.Healthcheck)
		}
	}
	slices.Sort(redisNames)
	if len(redisNames) != 5 {
		t.Fatalf("docker-compose.yml: %d Redis services %q, want 5", len(redisNames), redisNames)
	}

	// Every environment variable is one of the binary's.
	help, err := exec.Command(binPath, "--help").Output()
	if err != nil {
		t.Fatalf("redlockd --help: %v", err)
	}
	env := map[string]string{}
	for _, kv := range d.env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	for k, v := range gw.Environment {
		env[k] = v
	}
	for k := range env {
		if !strings.Contains(string(help), "env "+k+",") {
			t.Errorf("%s is not an environment variable of redlockd (see redlockd --help)", k)
		}
	}
	if env["REDLOCKD_RESTART_QUARANTINE"] != "auto" {
		t.Errorf("compose runs with restart quarantine %q, want auto", env["REDLOCKD_RESTART_QUARANTINE"])
	}

	// The same topology with processes.
	hostPort := map[string]string{}
	dirs := make([]string, len(redisNames))
	clients := make([]*redis.Client, len(redisNames))
	for i, name := range redisNames {
		dirs[i] = t.TempDir()
		addr := startComposeRedis(t, c.Services[name].Command, dirs[i])
		hostPort[name+":6379"] = addr
		clients[i] = redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = clients[i].Close() })
	}
	var urls []string
	for raw := range strings.SplitSeq(env["REDLOCKD_REDIS"], ",") {
		u, err := url.Parse(raw)
		if err != nil || hostPort[u.Host] == "" {
			t.Fatalf("REDLOCKD_REDIS: %q does not name a Redis service", raw)
		}
		u.Host = hostPort[u.Host]
		urls = append(urls, u.String())
	}
	env["REDLOCKD_REDIS"] = strings.Join(urls, ",")
	env["REDLOCKD_LISTEN"] = "127.0.0.1:0"
	var envList []string
	for k, v := range env {
		envList = append(envList, k+"="+v)
	}
	args := append(slices.Clone(d.entrypoint[1:]), d.cmd...)
	start := time.Now()
	g := startProcess(t, envList, args...)
	// Durable nodes vote at once: ready long before a quarantine of max TTL
	// (60s) would end.
	eventually(t, 20*time.Second, "/readyz ready without a quarantine", func() bool {
		return g.do(t, "GET", "/readyz", "").Status == 200
	})
	t.Logf("ready %v after start", time.Since(start).Round(time.Millisecond))

	res := resourceName(t)
	tok := lock(t, g, res, "").str(t, "token")
	for i, cl := range clients {
		if h := lockHolder(t, cl, lockKey(res)); h != tok {
			t.Errorf("%s: lock held by %q", redisNames[i], h)
		}
		if _, err := os.Stat(filepath.Join(dirs[i], "appendonlydir")); err != nil {
			t.Errorf("%s: no append-only file in its volume: %v", redisNames[i], err)
		}
	}

	// The image's health check, with the image's environment.
	port := g.URL[strings.LastIndex(g.URL, ":")+1:]
	probe := func() (int, string) {
		cmd := exec.Command(binPath, d.healthcheck[1:]...)
		cmd.Env = append(cleanEnv(), "REDLOCKD_LISTEN=0.0.0.0:"+port)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), string(out)
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	if code, out := probe(); code != 0 {
		t.Errorf("HEALTHCHECK on a running gateway: exit %d: %s", code, out)
	}
	g.Stop()
	if code, _ := probe(); code == 0 {
		t.Error("HEALTHCHECK passes on a stopped gateway")
	}
}

// startComposeRedis starts redis-server with the arguments of a compose
// service's command (after "redis-server"), on a free port of 127.0.0.1 with
// dir as its data directory, and kills it by PID at cleanup. It returns
// host:port.
func startComposeRedis(t *testing.T, command []string, dir string) string {
	t.Helper()
	return redistest.StartWith(t, redistest.Config{Dir: dir, Args: command[1:]}).Addr()
}

// TestDockerBuildVersion: the image's binary reports the version of the
// commit it was built from, not "dev", and --build-arg VERSION overrides it
// (Dockerfile, the build stage's comment). The test runs the Dockerfile's
// build command (there is no Docker engine here) in a clone of this
// repository, as the build context holds it (.dockerignore keeps .git).
func TestDockerBuildVersion(t *testing.T) {
	t.Parallel()
	redistest.Slow(t)
	_, d := readDeployment(t)
	// The build context of the image is a checkout, as this test's is.
	head, err := exec.Command("git", "-C", "..", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v (the tests run in a git checkout, as the image builds from one)", err)
	}
	src := t.TempDir()
	if out, err := exec.Command("git", "clone", "-q", "..", src).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	for _, tc := range []struct{ arg, want string }{
		{"", "-" + string(head[:12]) + " "}, // v0.0.0-<time>-<commit>, no +dirty
		{"v9.8.7", "redlockd v9.8.7 "},
	} {
		bin := filepath.Join(t.TempDir(), "redlockd")
		build := exec.Command("sh", "-c", strings.Replace(d.build, "-o /redlockd", "-o "+bin, 1))
		build.Dir = src
		build.Env = append(os.Environ(), "VERSION="+tc.arg)
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", d.build, err, out)
		}
		out, err := exec.Command(bin, "version").Output()
		if err != nil || !strings.Contains(string(out), tc.want) || strings.Contains(string(out), "dirty") {
			t.Errorf("VERSION=%q: redlockd version = %q, %v; want it to contain %q", tc.arg, out, err, tc.want)
		}
	}
}
