package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/redlockd/redlockd/redlock"
)

// env returns a lookupEnv over m.
func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func TestParseServeFlagsDefaults(t *testing.T) {
	c, err := ParseServeFlags(nil, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if exp, got := DefaultConfig(), c; !equalConfig(exp, got) {
		t.Fatalf("exp %v, got %v", exp, got)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	if !c.DevMode() {
		t.Fatal("no --redis should be dev mode")
	}
}

func equalConfig(a, b Config) bool { return a.String() == b.String() && len(a.Redis) == len(b.Redis) }

// allSet is a configuration where every field differs from its default, as
// flags and as environment variables.
var (
	allSetFlags = []string{
		"--listen", "0.0.0.0:9000",
		"--redis", "redis://a:6379, rediss://u:pw@b:6380/2,",
		"--default-ttl", "10s",
		"--max-ttl", "2m",
		"--max-wait", "5s",
		"--node-timeout", "20ms",
		"--drift-factor", "0.02",
		"--key-prefix", "x:",
		"--fence-idle-ttl", "48h",
		"--api-keys-file", "keys.json",
		"--tls-cert", "c.pem",
		"--tls-key", "k.pem",
		"--log-level", "debug",
		"--log-format", "console",
		"--restart-quarantine", "off",
		"--metrics-auth", "on",
		"--redis-ca-file", "ca.pem",
		"--max-waiters", "7",
		"--max-waiters-per-namespace", "3",
		"--max-connections", "99",
		"--read-header-timeout", "2s",
		"--idle-timeout", "3m",
		"--debug-listen", "127.0.0.1:6060",
	}
	allSetEnv = map[string]string{
		"REDLOCKD_LISTEN":              "0.0.0.0:9000",
		"REDLOCKD_REDIS":               "redis://a:6379, rediss://u:pw@b:6380/2,",
		"REDLOCKD_DEFAULT_TTL":         "10s",
		"REDLOCKD_MAX_TTL":             "2m",
		"REDLOCKD_MAX_WAIT":            "5s",
		"REDLOCKD_NODE_TIMEOUT":        "20ms",
		"REDLOCKD_DRIFT_FACTOR":        "0.02",
		"REDLOCKD_KEY_PREFIX":          "x:",
		"REDLOCKD_FENCE_IDLE_TTL":      "48h",
		"REDLOCKD_API_KEYS_FILE":       "keys.json",
		"REDLOCKD_TLS_CERT":            "c.pem",
		"REDLOCKD_TLS_KEY":             "k.pem",
		"REDLOCKD_LOG_LEVEL":           "debug",
		"REDLOCKD_LOG_FORMAT":          "console",
		"REDLOCKD_RESTART_QUARANTINE":  "off",
		"REDLOCKD_METRICS_AUTH":        "on",
		"REDLOCKD_REDIS_CA_FILE":       "ca.pem",
		"REDLOCKD_MAX_WAITERS":         "7",
		"REDLOCKD_READ_HEADER_TIMEOUT": "2s",
		"REDLOCKD_IDLE_TIMEOUT":        "3m",
		"REDLOCKD_DEBUG_LISTEN":        "127.0.0.1:6060",

		"REDLOCKD_MAX_WAITERS_PER_NAMESPACE": "3",
		"REDLOCKD_MAX_CONNECTIONS":           "99",
	}
)

func checkAllSet(t *testing.T, c Config) {
	t.Helper()
	exp := Config{
		Listen:            "0.0.0.0:9000",
		Redis:             []string{"redis://a:6379", "rediss://u:pw@b:6380/2"},
		DefaultTTL:        10 * time.Second,
		MaxTTL:            2 * time.Minute,
		MaxWait:           5 * time.Second,
		NodeTimeout:       20 * time.Millisecond,
		DriftFactor:       0.02,
		KeyPrefix:         "x:",
		FenceIdleTTL:      48 * time.Hour,
		APIKeysFile:       "keys.json",
		TLSCert:           "c.pem",
		TLSKey:            "k.pem",
		LogLevel:          "debug",
		LogFormat:         "console",
		MetricsAuth:       true,
		RedisCAFile:       "ca.pem",
		MaxWaiters:        7,
		ReadHeaderTimeout: 2 * time.Second,
		IdleTimeout:       3 * time.Minute,
		DebugListen:       "127.0.0.1:6060",
		RestartQuarantine: redlock.QuarantineOff,

		MaxWaitersPerNamespace: 3,
		MaxConnections:         99,
	}
	if !equalConfig(exp, c) || strings.Join(exp.Redis, " ") != strings.Join(c.Redis, " ") {
		t.Fatalf("\nexp %v\ngot %v", exp, c)
	}
}

func TestParseServeFlagsAll(t *testing.T) {
	c, err := ParseServeFlags(allSetFlags, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	checkAllSet(t, c)
}

func TestParseServeFlagsEnv(t *testing.T) {
	c, err := ParseServeFlags(nil, env(allSetEnv))
	if err != nil {
		t.Fatal(err)
	}
	checkAllSet(t, c)
}

func TestEnvNamesMatchHelp(t *testing.T) {
	var buf bytes.Buffer
	printServeFlags(&buf)
	help := buf.String()
	for name := range allSetEnv {
		if !strings.Contains(help, "env "+name+",") {
			t.Errorf("help does not mention %s", name)
		}
	}
	c := DefaultConfig()
	n := 0
	c.flagSet().VisitAll(func(f *flag.Flag) {
		n++
		if _, ok := allSetEnv[envName(f.Name)]; !ok {
			t.Errorf("flag --%s: missing from the test's allSetEnv", f.Name)
		}
		if !strings.Contains(help, "  --"+f.Name+" ") && !strings.Contains(help, "  --"+f.Name+"[=on|off]") {
			t.Errorf("help does not document --%s", f.Name)
		}
	})
	if exp, got := n, len(serveFlagOrder); exp != got {
		t.Errorf("serveFlagOrder has %d flags, the flag set %d", got, exp)
	}
	for _, want := range []string{"default 127.0.0.1:8080", "default 30s", "default 60s", "default 50ms", "default 0.01", "default redlockd:", "default info", "default json", "default auto"} {
		if !strings.Contains(help, want) {
			t.Errorf("help does not say %q", want)
		}
	}
}

func TestParseServeFlagsPrecedence(t *testing.T) {
	c, err := ParseServeFlags(
		[]string{"--default-ttl", "5s", "--restart-quarantine=on"},
		env(map[string]string{
			"REDLOCKD_DEFAULT_TTL":        "7s",  // loses to the flag
			"REDLOCKD_MAX_TTL":            "9s",  // wins over the default
			"REDLOCKD_RESTART_QUARANTINE": "off", // loses to the flag
			"REDLOCKD_KEY_PREFIX":         "",    // empty: unset
			"REDLOCKD_UNKNOWN":            "x",   // ignored
		}))
	if err != nil {
		t.Fatal(err)
	}
	if exp, got := 5*time.Second, c.DefaultTTL; exp != got {
		t.Errorf("default TTL: exp %v, got %v", exp, got)
	}
	if exp, got := 9*time.Second, c.MaxTTL; exp != got {
		t.Errorf("max TTL: exp %v, got %v", exp, got)
	}
	if c.RestartQuarantine != redlock.QuarantineOn {
		t.Error("restart quarantine: flag on should beat env off")
	}
	if exp, got := "redlockd:", c.KeyPrefix; exp != got {
		t.Errorf("key prefix: exp %q, got %q", exp, got)
	}
}

func TestParseServeFlagsErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
		want string
	}{
		"duration without unit": {args: []string{"--max-ttl", "10"}, want: "--max-ttl 10: missing unit, e.g. 10s"},
		"bad duration flag":     {args: []string{"-max-ttl=soon"}, want: "--max-ttl soon: not a duration, e.g. 50ms, 30s or 1m"},
		"empty duration":        {args: []string{"--max-ttl="}, want: `--max-ttl "": not a duration`},
		"bad duration env":      {env: map[string]string{"REDLOCKD_MAX_TTL": "soon"}, want: "REDLOCKD_MAX_TTL=soon: not a duration"},
		"env without unit":      {env: map[string]string{"REDLOCKD_MAX_TTL": "5"}, want: "REDLOCKD_MAX_TTL=5: missing unit, e.g. 5s"},
		"bad float":             {args: []string{"--drift-factor", "x"}, want: "--drift-factor x: not a number"},
		"int out of range":      {args: []string{"--max-waiters", "99999999999999999999"}, want: "--max-waiters 99999999999999999999: out of range"},
		"bad on/off":            {args: []string{"--metrics-auth", "maybe"}, want: "--metrics-auth maybe: want on/off, true/false, yes/no or 1/0"},
		"bad on/off joined":     {args: []string{"--metrics-auth=maybe"}, want: "--metrics-auth maybe: want on/off"},
		"bad on/off env":        {env: map[string]string{"REDLOCKD_METRICS_AUTH": "maybe"}, want: "REDLOCKD_METRICS_AUTH=maybe: want on/off"},
		"bad quarantine":        {args: []string{"--restart-quarantine", "maybe"}, want: "--restart-quarantine maybe: want auto, or on/off, true/false, yes/no or 1/0"},
		"bad quarantine env":    {env: map[string]string{"REDLOCKD_RESTART_QUARANTINE": "maybe"}, want: "REDLOCKD_RESTART_QUARANTINE=maybe: want auto, or on/off"},
		"unknown flag":          {args: []string{"--nope"}, want: "unknown flag --nope"},
		"positional":            {args: []string{"extra"}, want: `serve takes no arguments, got "extra"`},
		"flag needs a value":    {args: []string{"--listen"}, want: "--listen needs a value"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseServeFlags(tc.args, env(tc.env))
			var ue *UsageError
			if !errors.As(err, &ue) {
				t.Fatalf("want *UsageError, got %T %v", err, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
	for _, h := range []string{"-h", "--help", "-help"} {
		if _, err := ParseServeFlags([]string{h}, env(nil)); !errors.Is(err, flag.ErrHelp) {
			t.Errorf("%s: want flag.ErrHelp, got %v", h, err)
		}
	}
}

func TestValidate(t *testing.T) {
	for name, tc := range map[string]struct {
		edit func(*Config)
		want string // "" means valid
	}{
		"defaults": {func(*Config) {}, ""},
		"five nodes": {func(c *Config) {
			c.Redis = []string{"redis://a", "redis://b:1", "rediss://u:p@c:2/3", "redis://[::1]:4", "redis://10.0.0.1:5"}
		}, ""},
		"any interface":         {func(c *Config) { c.Listen = ":8080" }, ""},
		"port 0":                {func(c *Config) { c.Listen = "127.0.0.1:0" }, ""},
		"drift 0":               {func(c *Config) { c.DriftFactor = 0 }, ""},
		"max wait 1ms":          {func(c *Config) { c.MaxWait = time.Millisecond }, ""},
		"max wait 0":            {func(c *Config) { c.MaxWait = 0 }, "--max-wait 0s must be positive"},
		"ttl equal":             {func(c *Config) { c.DefaultTTL, c.MaxTTL = time.Second, time.Second }, ""},
		"tls pair":              {func(c *Config) { c.TLSCert, c.TLSKey = "c", "k" }, ""},
		"listen no port":        {func(c *Config) { c.Listen = "localhost" }, "--listen"},
		"listen bad port":       {func(c *Config) { c.Listen = "localhost:http" }, `port "http"`},
		"listen big port":       {func(c *Config) { c.Listen = "localhost:65536" }, `port "65536"`},
		"debug every interface": {func(c *Config) { c.DebugListen = "0.0.0.0:6060" }, ""},
		"debug without host": {func(c *Config) { c.DebugListen = ":6060" },
			`--debug-listen ":6060": no host: give 127.0.0.1:6060, or 0.0.0.0:6060 to serve pprof on every interface`},
		"debug bad port":       {func(c *Config) { c.DebugListen = "127.0.0.1:x" }, `--debug-listen "127.0.0.1:x": port "x"`},
		"default ttl small":    {func(c *Config) { c.DefaultTTL = 99 * time.Millisecond }, "--default-ttl 99ms is below the minimum TTL 100ms"},
		"default over max":     {func(c *Config) { c.DefaultTTL = 2 * time.Minute }, "--max-ttl 1m0s is below --default-ttl 2m0s"},
		"max wait negative":    {func(c *Config) { c.MaxWait = -time.Second }, "--max-wait -1s must be positive"},
		"node timeout 0":       {func(c *Config) { c.NodeTimeout = 0 }, "--node-timeout 0s must be positive"},
		"node timeout big":     {func(c *Config) { c.NodeTimeout = 30 * time.Second }, "must be below --default-ttl"},
		"drift negative":       {func(c *Config) { c.DriftFactor = -0.1 }, "--drift-factor -0.1 must be in [0, 0.5)"},
		"drift half":           {func(c *Config) { c.DriftFactor = 0.5 }, "--drift-factor 0.5"},
		"empty prefix":         {func(c *Config) { c.KeyPrefix = "" }, "--key-prefix must not be empty"},
		"api keys":             {func(c *Config) { c.APIKeysFile = "keys.json" }, ""},
		"metrics auth":         {func(c *Config) { c.APIKeysFile, c.MetricsAuth = "keys.json", true }, ""},
		"metrics auth no keys": {func(c *Config) { c.MetricsAuth = true }, "--metrics-auth on needs --api-keys-file"},
		"redis ca":             {func(c *Config) { c.Redis, c.RedisCAFile = []string{"redis://a", "rediss://b"}, "ca.pem" }, ""},
		"redis ca no rediss":   {func(c *Config) { c.Redis, c.RedisCAFile = []string{"redis://a"}, "ca.pem" }, "--redis-ca-file is given but no --redis URL is rediss://"},
		"max waiters 0":        {func(c *Config) { c.MaxWaiters = 0 }, "--max-waiters 0 must be at least 1"},
		"ns waiters > max":     {func(c *Config) { c.MaxWaitersPerNamespace = c.MaxWaiters + 1 }, "--max-waiters-per-namespace 10001 must be in [0, --max-waiters 10000]"},
		"ns waiters < 0":       {func(c *Config) { c.MaxWaitersPerNamespace = -1 }, "--max-waiters-per-namespace -1 must be in"},
		"max connections 0":    {func(c *Config) { c.MaxConnections = 0 }, "--max-connections 0 must be at least 1"},
		"read header 0":        {func(c *Config) { c.ReadHeaderTimeout = 0 }, "--read-header-timeout 0s must be positive"},
		"idle timeout 0":       {func(c *Config) { c.IdleTimeout = -time.Second }, "--idle-timeout -1s must be positive"},
		"cert only":            {func(c *Config) { c.TLSCert = "c" }, "--tls-cert and --tls-key go together"},
		"key only":             {func(c *Config) { c.TLSKey = "k" }, "--tls-cert and --tls-key go together"},
		"log level":            {func(c *Config) { c.LogLevel = "trace" }, `--log-level "trace"`},
		"log level upper":      {func(c *Config) { c.LogLevel = "INFO" }, `--log-level "INFO"`},
		"log format":           {func(c *Config) { c.LogFormat = "text" }, `--log-format "text"`},
		"redis scheme":         {func(c *Config) { c.Redis = []string{"redis://a", "http://b"} }, `--redis URL #2: http://b: scheme "http" is not redis:// or rediss://`},
		"redis no scheme":      {func(c *Config) { c.Redis = []string{"localhost:6379"} }, "--redis URL #1"},
		"redis unix":           {func(c *Config) { c.Redis = []string{"unix:///tmp/redis.sock"} }, `scheme "unix"`},
		"redis no host":        {func(c *Config) { c.Redis = []string{"redis:///0"} }, "no host"},
		"redis bad db":         {func(c *Config) { c.Redis = []string{"redis://a/x"} }, `invalid database number: "x"`},
		"redis bad option":     {func(c *Config) { c.Redis = []string{"redis://a/?foo=1"} }, "unexpected option: foo"},
		"redis bad host:port":  {func(c *Config) { c.Redis = []string{"redis://a:1:2"} }, "bad host:port"},
		"redis duplicate":      {func(c *Config) { c.Redis = []string{"redis://a:1/0", "redis://b:1", "redis://a:1/1"} }, "a:1 is already URL #1"},
		"redis default port":   {func(c *Config) { c.Redis = []string{"redis://a", "redis://a:6379"} }, "a:6379 is already URL #1"},
		"redis not a URL":      {func(c *Config) { c.Redis = []string{"redis://a b"} }, "--redis URL #1: not a valid URL"},
		"every error reported": {func(c *Config) { c.LogLevel, c.LogFormat = "x", "y" }, "--log-format"},
	} {
		t.Run(name, func(t *testing.T) {
			c := DefaultConfig()
			tc.edit(&c)
			err := c.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			var ue *UsageError
			if !errors.As(err, &ue) {
				t.Fatalf("want *UsageError, got %T %v", err, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestRedisOptionsFromURL(t *testing.T) {
	c := DefaultConfig()
	c.Redis = []string{"redis://alice:p%2Cw@a:7000/3", "rediss://:pw2@b", "redis://c"}
	opts, err := c.redisOptions()
	if err != nil {
		t.Fatal(err)
	}
	if exp, got := 3, len(opts); exp != got {
		t.Fatalf("nodes: exp %d, got %d", exp, got)
	}
	o := opts[0]
	if o.Addr != "a:7000" || o.Username != "alice" || o.Password != "p,w" || o.DB != 3 || o.TLSConfig != nil {
		t.Errorf("node 1: %+v", o)
	}
	o = opts[1]
	if o.Addr != "b:6379" || o.Password != "pw2" || o.TLSConfig == nil || o.TLSConfig.ServerName != "b" {
		t.Errorf("node 2: addr %s, TLS %v", o.Addr, o.TLSConfig)
	}
	if o := opts[2]; o.Addr != "c:6379" || o.Password != "" {
		t.Errorf("node 3: %+v", o)
	}
}

// TestRedisPasswordNeverShown feeds URLs with a password through every error
// path and every way of printing a Config.
func TestRedisPasswordNeverShown(t *testing.T) {
	const pw = "S3cr3tPw"
	urls := []string{
		"http://u:" + pw + "@h:1",                      // bad scheme
		"redis://u:" + pw + "@h:1/x",                   // bad db
		"redis://u:" + pw + "@h:1/?password=" + pw,     // not a go-redis option: shown without its value
		"redis://u:" + pw + "@h:1/?dial_timeout=" + pw, // bad option value
		"redis://u:" + pw + "@h:1:2",                   // bad host:port
		"redis://u:" + pw + "@h:x",                     // url.Parse error
		"redis://u:" + pw + "%zz@h:1",                  // bad escape in the password
		"redis://u:" + pw + "@h b:1",                   // url.Parse error in host
		"redis://:" + pw + "@h:1/0",                    // valid
		"redis://:" + pw + "@h:1/1",                    // duplicate
		"rediss://u:" + pw + "%40x@h:2",                // valid, percent-encoded
	}
	valid := map[int]bool{9: true, 11: true}
	c := DefaultConfig()
	c.Redis = urls
	err := c.Validate()
	if err == nil {
		t.Fatal("want errors")
	}
	for _, s := range []string{
		err.Error(), c.String(), fmt.Sprint(c), fmt.Sprintf("%v", c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c),
		urlList(c.Redis).String(),
	} {
		if strings.Contains(s, pw) {
			t.Errorf("password shown in %q", s)
		}
	}
	for i := range urls {
		if !strings.Contains(err.Error(), fmt.Sprintf("URL #%d:", i+1)) && !valid[i+1] {
			t.Errorf("no error for URL #%d %s in %v", i+1, redactURL(urls[i]), err)
		}
	}
	// Through the command line too, given without --redis (taken for a
	// command) or as the value of another flag.
	for _, args := range [][]string{
		{"--redis", strings.Join(urls, ",")}, {urls[0]}, {"--restart-quarantine", urls[0]}, {"--max-ttl=" + urls[0]},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, &stdout, &stderr, env(nil)); code != exitUsage {
			t.Errorf("%q: exit %d, want %d", args[0], code, exitUsage)
		}
		if strings.Contains(stderr.String(), pw) {
			t.Errorf("password in stderr: %s", stderr.String())
		}
	}
}

func TestRun(t *testing.T) {
	for name, tc := range map[string]struct {
		args   []string
		env    map[string]string
		code   int
		stdout string
		stderr string
	}{
		"help":            {args: []string{"help"}, code: 0, stdout: "REDLOCKD_LISTEN"},
		"--help":          {args: []string{"--help"}, code: 0, stdout: "--restart-quarantine auto|on|off"},
		"--version":       {args: []string{"--version"}, code: 0, stdout: "redlockd "},
		"-version extra":  {args: []string{"-version", "x"}, code: 64, stderr: "version takes no arguments"},
		"-h":              {args: []string{"-h"}, code: 0, stdout: "Usage:"},
		"serve --help":    {args: []string{"serve", "--help"}, code: 0, stdout: "REDLOCKD_REDIS"},
		"version":         {args: []string{"version"}, code: 0, stdout: "redlockd "},
		"version extra":   {args: []string{"version", "x"}, code: 64, stderr: "version takes no arguments"},
		"unknown command": {args: []string{"frobnicate"}, code: 64, stderr: `unknown command "frobnicate"`},
		"run":             {args: []string{"run"}, code: 64, stderr: "--resource is required"},
		"keygen":          {args: []string{"keygen"}, code: 64, stderr: "--name must be"},
		"keygen --help":   {args: []string{"keygen", "--help"}, code: 0, stdout: "--api-keys-file"},
		"probe --help":    {args: []string{"probe", "-h"}, code: 0, stdout: "HEALTHCHECK"},
		"probe bad url":   {args: []string{"probe", "--url", "ftp://x"}, code: 64, stderr: "must be an http:// or https:// URL"},
		"serve stray URL": {args: []string{"serve", "redis://u:S3cr3tPw@h:1"}, code: 64, stderr: `got "redis://u:xxxxx@h:1"`},
		"bad flag":        {args: []string{"--max-ttl", "x"}, code: 64, stderr: "Run 'redlockd --help' for usage."},
		"bad serve flag":  {args: []string{"serve", "--nope"}, code: 64, stderr: "redlockd: unknown flag --nope\n"},
		"bad config":      {args: []string{"--log-format", "xml"}, code: 64, stderr: `--log-format "xml"`},
		"bad env":         {env: map[string]string{"REDLOCKD_NODE_TIMEOUT": "fast"}, code: 64, stderr: "REDLOCKD_NODE_TIMEOUT"},
		"api keys file":   {args: []string{"--api-keys-file", "/nonexistent/keys.json"}, code: 64, stderr: "--api-keys-file: open /nonexistent/keys.json"},
		"redis ca file": {args: []string{"--redis", "rediss://127.0.0.1:1", "--redis-ca-file", "/nonexistent/ca.pem", "--listen", "127.0.0.1:0"},
			code: 64, stderr: "--redis-ca-file: open /nonexistent/ca.pem"},
		"tls files missing": {args: []string{"--tls-cert", "/nonexistent/c.pem", "--tls-key", "/nonexistent/k.pem", "--listen", "127.0.0.1:0"},
			code: 64, stderr: "--tls-cert/--tls-key"},
	} {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(t.Context(), tc.args, &stdout, &stderr, env(tc.env))
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tc.code, stderr.String())
			}
			if !strings.Contains(stdout.String(), tc.stdout) {
				t.Errorf("stdout %q does not contain %q", stdout.String(), tc.stdout)
			}
			if !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("stderr %q does not contain %q", stderr.String(), tc.stderr)
			}
		})
	}
}

func TestVersionFrom(t *testing.T) {
	// go build in a checkout stamps a pseudo-version with the revision.
	vcs := &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20250102030405-0123456789ab+dirty"}}
	for name, tc := range map[string]struct {
		v    string
		bi   *debug.BuildInfo
		ok   bool
		want string
	}{
		"ldflags":       {"v1.2.3", vcs, true, "v1.2.3"},
		"no build info": {"dev", nil, false, "dev"},
		"vcs dirty":     {"dev", vcs, true, "v0.0.0-20250102030405-0123456789ab+dirty"},
		"no vcs":        {"dev", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, true, "dev"},
		"go install @v": {"dev", &debug.BuildInfo{Main: debug.Module{Version: "v0.3.0"}}, true, "v0.3.0"},
	} {
		t.Run(name, func(t *testing.T) {
			if got := versionFrom(tc.v, tc.bi, tc.ok); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}
