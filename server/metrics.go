package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/redlockd/redlockd/redlock"
)

// Metrics are the Prometheus metrics of a Server and its coordinator, in a
// registry of their own. They are a redlock.Observer: create them before
// the coordinator, give them to it (redlock.Options.Observer) and to one
// Server (Config.Metrics). Labels never hold tokens, keys or credentials.
type Metrics struct {
	reg *prometheus.Registry

	requests     *prometheus.CounterVec   // route, method, status
	requestTime  *prometheus.HistogramVec // route, method
	opTime       *prometheus.HistogramVec // op
	acquisitions *prometheus.CounterVec   // outcome
	waitTime     *prometheus.HistogramVec // acquired
	nodeTime     *prometheus.HistogramVec // node
	nodeErrors   *prometheus.CounterVec   // node
	rounds       prometheus.Counter
	splitVotes   prometheus.Counter
	waiters      prometheus.Gauge
	census       atomic.Pointer[redlock.Census] // the last one observed

	watchOnce sync.Once
}

var _ redlock.Observer = (*Metrics)(nil)

// nodeStatusTimeout bounds how long a scrape waits for the nodes' status.
const nodeStatusTimeout = 500 * time.Millisecond

// Histogram buckets, in seconds: requests from a sub-millisecond round trip
// to waits of a minute, one node call up to the node timeout, waits up to
// the largest max wait one would set.
var (
	requestBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	nodeBuckets    = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}
	waitBuckets    = []float64{.005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}
)

// acquireOutcomes are the values of redlockd_acquisitions_total's outcome
// label, by the outcome of the request (a problem kind, or "acquired").
var acquireOutcomes = map[string]string{
	"acquired":           "acquired",
	"lock-held":          "held",
	"quorum-unavailable": "unavailable",
	"invalid-request":    "invalid",
	"payload-too-large":  "invalid",
	"unauthorized":       "unauthorized",
	"too-many-waiters":   "too_many_waiters",
	"limit-mismatch":     "limit_mismatch",
	"shutting-down":      "shutting_down",
	outcomeClientGone:    "client_gone",
	"internal":           "error",
}

// NewMetrics returns the metrics with nothing observed yet, and the Go
// runtime and process collectors registered.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redlockd_http_requests_total",
			Help: "HTTP requests by route pattern (\"unmatched\" when none), method and status code.",
		}, []string{"route", "method", "status"}),
		requestTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "redlockd_http_request_duration_seconds",
			Help:    "Time from reading an HTTP request to its last byte written, by route pattern and method; includes the wait of waiting acquires.",
			Buckets: requestBuckets,
		}, []string{"route", "method"}),
		opTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "redlockd_lock_operation_duration_seconds",
			Help:    "Time of lock operations against the Redis nodes, whatever their outcome, by op (acquire, release, extend, inspect, list: one page; acquire_permit, extend_permit, release_permit, inspect_semaphore); acquires that asked to wait are in redlockd_wait_duration_seconds instead.",
			Buckets: requestBuckets,
		}, []string{"op"}),
		acquisitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redlockd_acquisitions_total",
			Help: "Acquire requests of locks (of one or several resources) and permits by outcome: acquired, held (409 lock-held), limit_mismatch (409), unavailable (503 quorum-unavailable), invalid (400, 413), unauthorized (401), too_many_waiters, shutting_down, client_gone (the client went away before the answer), error (500).",
		}, []string{"outcome"}),
		waitTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "redlockd_wait_duration_seconds",
			Help:    "How long acquires with wait_ms > 0 waited, by whether they got the lock.",
			Buckets: waitBuckets,
		}, []string{"acquired"}),
		nodeTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "redlockd_node_command_duration_seconds",
			Help:    "Time of each call to one Redis node in a lock operation (bounded by the node timeout), by node host:port, failures included.",
			Buckets: nodeBuckets,
		}, []string{"node"}),
		nodeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redlockd_node_command_errors_total",
			Help: "Calls to one Redis node in a lock operation that failed or timed out, by node host:port.",
		}, []string{"node"}),
		rounds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "redlockd_acquire_rounds_total",
			Help: "Acquire rounds sent to the nodes (a waiting acquire may send several).",
		}),
		splitVotes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "redlockd_split_votes_total",
			Help: "Failed acquire rounds where contention split the votes so that no owner may have won a quorum.",
		}),
		waiters: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "redlockd_waiters",
			Help: "Acquires waiting for a lock on this gateway now.",
		}),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.requests, m.requestTime, m.opTime, m.acquisitions, m.waitTime, m.nodeTime, m.nodeErrors,
		m.rounds, m.splitVotes, m.waiters, censusCollector{&m.census},
	)
	// Every outcome, op and wait series exists from the start, at 0.
	for _, o := range acquireOutcomes {
		m.acquisitions.WithLabelValues(o)
	}
	for _, op := range []string{"acquire", "release", "extend", "inspect", "list", "acquire_permit", "extend_permit", "release_permit", "inspect_semaphore"} {
		m.opTime.WithLabelValues(op)
	}
	m.waitTime.WithLabelValues("false")
	m.waitTime.WithLabelValues("true")
	return m
}

// LogLinesDropped registers redlockd_log_lines_dropped_total, read from
// dropped at each scrape: the log lines the process's log output dropped
// because they came faster than it could write them.
func (m *Metrics) LogLinesDropped(dropped func() uint64) {
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "redlockd_log_lines_dropped_total",
		Help: "Log lines dropped because they came faster than the log output (stderr) took them.",
	}, func() float64 { return float64(dropped()) }))
}

// Waited records a waiting acquire that ended (redlock.Observer). Nil-safe.
func (m *Metrics) Waited(_ context.Context, waited time.Duration, acquired bool) {
	if m == nil {
		return
	}
	m.waitTime.WithLabelValues(strconv.FormatBool(acquired)).Observe(waited.Seconds())
}

// NodeCommand records one call to one node (redlock.Observer). node must be
// host:port, without credentials. Nil-safe.
func (m *Metrics) NodeCommand(_ context.Context, node string, d time.Duration, err error) {
	if m == nil {
		return
	}
	m.nodeTime.WithLabelValues(node).Observe(d.Seconds())
	// context.Canceled: the request gave up on the node (its client went
	// away, or it was shut down), which is no failure of the node.
	if err != nil && !errors.Is(err, context.Canceled) {
		m.nodeErrors.WithLabelValues(node).Inc()
	}
}

// Decided counts acquire rounds and split votes (redlock.Observer); the
// outcomes of acquire requests are counted by the request
// (redlockd_acquisitions_total). Nil-safe.
func (m *Metrics) Decided(_ context.Context, d redlock.Decision) {
	if m == nil {
		return
	}
	if d.Round {
		m.rounds.Inc()
	}
	if d.Split {
		m.splitVotes.Inc()
	}
}

// Waiting counts the acquires in the coordinator's queue of waiters
// (redlock.Observer). Nil-safe.
func (m *Metrics) Waiting(_ context.Context, delta int) {
	if m == nil {
		return
	}
	m.waiters.Add(float64(delta))
}

// Census keeps the last key census for redlockd_keys (redlock.Observer).
// Nil-safe.
func (m *Metrics) Census(c redlock.Census) {
	if m == nil {
		return
	}
	m.census.Store(&c)
}

// watch registers the metrics read at scrape time from the server's
// Locker: quorum, and each node's up and quarantine state. Only the first
// call registers anything.
func (m *Metrics) watch(s *Server) {
	m.watchOnce.Do(func() {
		m.reg.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "redlockd_quorum",
				Help: "Nodes a lock needs (N/2+1).",
			}, func() float64 { return float64(s.cfg.Locker.Quorum()) }),
			nodeCollector{locker: s.cfg.Locker},
			buildInfo(s.cfg.Version),
		)
	})
}

// buildInfo is redlockd_build_info: 1, labelled with version, the VCS
// revision the go command stamped into the binary ("" if none) and the Go
// version, as Prometheus and etcd label theirs.
func buildInfo(version string) prometheus.Gauge {
	revision := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, st := range bi.Settings {
			if st.Key == "vcs.revision" {
				revision = st.Value
			}
		}
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "redlockd_build_info",
		Help:        "1, labelled with the version of redlockd (as `redlockd version` prints it), its VCS revision (empty if unknown) and the Go version that built it.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": runtime.Version()},
	})
	g.Set(1)
	return g
}

// nodeCollector reports each node's state from Locker.Status at scrape time.
type nodeCollector struct{ locker Locker }

var (
	nodeUpDesc = prometheus.NewDesc("redlockd_node_up",
		"1 if the node's last health check (PING, INFO and a write) succeeded and no command failed on it since, else 0; by node host:port.", []string{"node"}, nil)
	nodeSlowDesc = prometheus.NewDesc("redlockd_node_slow",
		"1 if the node is up but its last health check took at least half the node timeout (requests do not wait for it), else 0; by node host:port.", []string{"node"}, nil)
	nodeQuarantinedDesc = prometheus.NewDesc("redlockd_node_quarantined",
		"1 while the node is in quarantine (it does not vote: it restarted, or was a replica, within max TTL), else 0; by node host:port.", []string{"node"}, nil)
)

func (nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- nodeUpDesc
	ch <- nodeSlowDesc
	ch <- nodeQuarantinedDesc
}

func (c nodeCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), nodeStatusTimeout)
	defer cancel()
	now := time.Now()
	for _, n := range c.locker.Status(ctx) {
		ch <- prometheus.MustNewConstMetric(nodeUpDesc, prometheus.GaugeValue, boolValue(n.Up), n.Addr)
		ch <- prometheus.MustNewConstMetric(nodeSlowDesc, prometheus.GaugeValue, boolValue(n.Slow), n.Addr)
		ch <- prometheus.MustNewConstMetric(nodeQuarantinedDesc, prometheus.GaugeValue, boolValue(n.QuarantinedUntil.After(now)), n.Addr)
	}
}

// censusCollector reports the key census (see redlock.Census): the keys of
// each namespace on one node, for alerts on a tenant that grows the nodes'
// memory.
type censusCollector struct {
	last *atomic.Pointer[redlock.Census]
}

var keysDesc = prometheus.NewDesc("redlockd_keys",
	"Keys under the key prefix on one node at the last census (every minute, the nodes taking turns), by namespace (\"\" is the default): the records of locks held, and a fencing-token counter per resource used within --fence-idle-ttl.",
	[]string{"namespace"}, nil)

func (censusCollector) Describe(ch chan<- *prometheus.Desc) { ch <- keysDesc }

func (c censusCollector) Collect(ch chan<- prometheus.Metric) {
	last := c.last.Load()
	if last == nil {
		return
	}
	for ns, n := range last.Keys {
		ch <- prometheus.MustNewConstMetric(keysDesc, prometheus.GaugeValue, float64(n), ns)
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// observeRequest records one HTTP request. route is its pattern ("" when
// none matched); outcome is what the access log shows.
func (m *Metrics) observeRequest(route, method string, status int, d time.Duration, outcome string) {
	if m == nil {
		return
	}
	if route == "" {
		route = "unmatched"
	}
	if !slices.Contains(methods, method) {
		method = "other" // so that clients cannot grow the label set
	}
	m.requests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
	m.requestTime.WithLabelValues(route, method).Observe(d.Seconds())
	if (route == "/locks/{resource}" || route == "/locks" || route == "/semaphores/{name}") && method == http.MethodPost {
		m.acquisitions.WithLabelValues(cmp.Or(acquireOutcomes[outcome], "error")).Inc()
	}
}

func (m *Metrics) observeOp(op string, start time.Time) {
	if m == nil {
		return
	}
	m.opTime.WithLabelValues(op).Observe(time.Since(start).Seconds())
}

// metricsHandler serves GET /metrics through promhttp: the Prometheus text
// format, or OpenMetrics to a scraper whose Accept asks for it, gzipped to
// one that accepts gzip. Without Config.Metrics it answers 404 not-found.
func (s *Server) metricsHandler() http.Handler {
	if s.cfg.Metrics == nil {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.writeProblem(w, r, errNoMetrics) })
	}
	h := promhttp.HandlerFor(s.cfg.Metrics.reg, promhttp.HandlerOpts{
		// A collector that fails (a scrape that outlives the nodes' status)
		// is logged, and what could be gathered is served.
		ErrorLog:          promLog{s.cfg.Log},
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: true,
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		setOutcome(r.Context(), "metrics")
		h.ServeHTTP(w, r)
	})
}

// promLog is promhttp's error log on the server's logger.
type promLog struct{ log zerolog.Logger }

func (l promLog) Println(v ...any) { l.log.Warn().Msg(fmt.Sprint(v...)) }
