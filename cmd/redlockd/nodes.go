package main

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/redlockd/redlockd/redlock"
)

// startNodes returns the go-redis options of the nodes: parsed from --redis,
// or those of freshly started dev nodes.
func (m *Main) startNodes() ([]*redis.Options, error) {
	if !m.Config.DevMode() {
		opts, err := m.Config.redisOptions()
		if err != nil {
			return nil, err
		}
		roots, err := m.Config.redisRoots()
		if err != nil {
			return nil, err
		}
		for _, o := range opts {
			if o.TLSConfig != nil && roots != nil {
				o.TLSConfig.RootCAs = roots
			}
		}
		return opts, nil
	}
	d, err := startDevNodes(devNodeCount)
	if err != nil {
		return nil, err
	}
	m.dev = d
	m.Log.Warn().Strs("nodes", d.Addrs()).
		Msg("DEV MODE: no --redis given, using 5 embedded in-memory Redis nodes inside this process. " +
			"NOTHING IS DURABLE OR FAULT TOLERANT: every lock and fencing counter is lost when redlockd stops. " +
			"Give --redis URLs of independent Redis masters for real use")
	return d.Options(), nil
}

// redisRoots reads --redis-ca-file; nil (the system's roots) without one.
func (c Config) redisRoots() (*x509.CertPool, error) {
	if c.RedisCAFile == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(c.RedisCAFile)
	if err != nil {
		return nil, usageErrorf("--redis-ca-file: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, usageErrorf("--redis-ca-file %s: no PEM certificate found", c.RedisCAFile)
	}
	return pool, nil
}

// redisOptions parses the Redis URLs with redis.ParseURL (user, password,
// TLS and db come from the URL). Its errors never contain a password.
func (c Config) redisOptions() ([]*redis.Options, error) {
	var (
		opts []*redis.Options
		errs []error
		seen = map[string]int{}
	)
	for i, raw := range c.Redis {
		o, err := parseRedisURL(raw)
		if err != nil {
			errs = append(errs, fmt.Errorf("--redis URL #%d: %w", i+1, err))
			continue
		}
		if j, dup := seen[o.Addr]; dup {
			errs = append(errs, fmt.Errorf("--redis URL #%d: %s is already URL #%d: the nodes must be independent Redis servers", i+1, o.Addr, j))
			continue
		}
		seen[o.Addr] = i + 1
		opts = append(opts, o)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return opts, nil
}

// parseRedisURL parses one node URL. Its errors show the URL with the
// password replaced by xxxxx, or not at all.
func parseRedisURL(raw string) (*redis.Options, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error quotes the whole URL; show it only if it has no userinfo.
		if strings.Contains(raw, "@") {
			return nil, errors.New("not a valid URL (not shown: it may contain a password)")
		}
		return nil, fmt.Errorf("not a valid URL: %v", err)
	}
	shown := redact(u)
	switch {
	case u.Scheme != "redis" && u.Scheme != "rediss":
		return nil, fmt.Errorf("%s: scheme %q is not redis:// or rediss://", shown, u.Scheme)
	case u.Host == "" || u.Hostname() == "":
		return nil, fmt.Errorf("%s: no host", shown)
	}
	o, err := redis.ParseURL(raw)
	if err != nil {
		msg := err.Error()
		if p, ok := u.User.Password(); ok && p != "" {
			msg = strings.ReplaceAll(msg, p, "xxxxx")
			msg = strings.ReplaceAll(msg, url.UserPassword("", p).String()[1:], "xxxxx") // percent-encoded form
		}
		return nil, fmt.Errorf("%s: %s", shown, msg)
	}
	// url.Parse takes "h:1:2" as host "h:1", port "2".
	if h, _, err := net.SplitHostPort(o.Addr); err != nil || (strings.Contains(h, ":") && net.ParseIP(h) == nil) {
		return nil, fmt.Errorf("%s: bad host:port", shown)
	}
	return o, nil
}

// logCluster logs the nodes (host:port only, never credentials), the quorum,
// and warnings about unsafe settings.
func (m *Main) logCluster(nodes []*redis.Options) {
	c := m.Config
	addrs := make([]string, len(nodes))
	for i, o := range nodes {
		addrs[i] = o.Addr
	}
	n, quorum := m.coord.Nodes(), m.coord.Quorum()
	m.Log.Info().Strs("nodes", addrs).Int("n", n).Int("quorum", quorum).
		Int("tolerated_failures", n-quorum).Msg("redlock cluster")
	// redlock.New itself warns when n == 1.
	if n > 1 && n%2 == 0 {
		m.Log.Warn().Int("n", n).Int("quorum", quorum).
			Msgf("an even number of nodes tolerates no more failures than %d nodes: prefer an odd number", n-1)
	}
	switch {
	case c.DevMode():
		m.Log.Info().Msg("restart quarantine and node identity checks do not apply to embedded dev nodes")
	case c.RestartQuarantine == redlock.QuarantineAuto:
		m.Log.Info().Str("quarantine", c.MaxTTL.String()).
			Msg("restart quarantine auto: a node that (re)started less than max TTL ago does not vote unless it runs appendonly yes and appendfsync always; /readyz says why for each node")
	case c.RestartQuarantine == redlock.QuarantineOn:
		m.Log.Info().Str("quarantine", c.MaxTTL.String()).
			Msg("restart quarantine on: a node that (re)started less than max TTL ago does not vote; a freshly started cluster grants no lock until its nodes have been up for max TTL")
	default:
		m.Log.Warn().Msg("restart quarantine off: safe only if every Redis node runs with appendfsync always")
	}
	if c.DriftFactor == 0 {
		m.Log.Warn().Msg("drift factor 0: no clock drift allowance beyond 2ms")
	}
}
