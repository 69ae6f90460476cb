package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/redis/go-redis/v9"
	"github.com/redlockd/redlockd/redlock"
	"github.com/redlockd/redlockd/server"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// HTTP server limits: the write timeout is MaxWait + writeTimeoutMargin, so
// that the longest allowed wait still gets its answer; the body has
// bodyReadTimeout after the headers.
const (
	bodyReadTimeout        = 5 * time.Second
	writeTimeoutMargin     = 10 * time.Second
	defaultShutdownTimeout = 10 * time.Second
	traceFlushTimeout      = 5 * time.Second
)

// Main is the `redlockd serve` program: Open starts it, Run serves until its
// context ends, Close shuts it down gracefully. Tests run it in-process on
// 127.0.0.1:0 and learn the port with Addr.
type Main struct {
	Config          Config         // set it before Open
	Stderr          io.Writer      // receives the logs; default os.Stderr
	ShutdownTimeout time.Duration  // bounds the graceful shutdown; default 10s
	UnknownEnv      []envFinding   // what checkEnv found: Open logs them
	Log             zerolog.Logger // built by Open from Config and Stderr

	logOut *logOutput // Log's output when Stderr is a file (see bufferedOutput), else nil

	// The API keys and TLS certificate in use (nil without); Reload replaces them.
	keys *server.Keys
	cert atomic.Pointer[tls.Certificate]

	dev      *devNodes
	coord    *redlock.Coordinator
	srv      *server.Server
	http     *http.Server
	ln       net.Listener
	debug    *http.Server             // --debug-listen's, or nil
	tracer   *sdktrace.TracerProvider // with Config.Tracing, else nil
	served   chan struct{}            // closed when http.Server.Serve returned
	serveErr error                    // what it returned, ErrServerClosed as nil

	closeOnce sync.Once
	closeErr  error
}

// identityWait bounds the wait for every node's first health check at start,
// which reads its server's identity (run_id).
const identityWait = 5 * time.Second

// NewMain returns a Main with the default configuration.
func NewMain() *Main {
	return &Main{Config: DefaultConfig()}
}

// Open validates the configuration, starts the nodes (dev mode), the
// coordinator and the HTTP server, and returns once the listener is bound
// (logged as "listening"). On error it closes what it started. May return
// a *UsageError.
func (m *Main) Open() (err error) {
	if m.ln != nil {
		return errors.New("already open")
	}
	c := m.Config
	if err := c.Validate(); err != nil {
		return err
	}
	cert, err := c.loadTLS()
	if err != nil {
		return err
	}
	if m.keys, err = c.loadKeys(); err != nil {
		return err
	}
	tlsConfig := m.tlsConfig(cert)
	var logTo io.Writer = cmp.Or[io.Writer](m.Stderr, os.Stderr)
	if bufferedOutput(logTo) {
		m.logOut = newLogOutput(logTo)
		logTo = m.logOut
	}
	m.Log = newLogger(logTo, c)
	if m.logOut != nil {
		log.SetFlags(0)
		log.SetOutput(libLog{newLogger(m.logOut.Direct(), c).With().Str("component", "log").Logger()})
	}
	// go-redis logs dial failures on its own: make them JSON lines too.
	redis.SetLogger(redisLog{m.Log.With().Str("component", "go-redis").Logger()})
	defer func() {
		if err != nil {
			m.closeAll()
		}
	}()

	m.Log.Info().Str("version", Version()).Stringer("config", c).Msg("redlockd starting")
	logUnknownEnv(m.Log, m.UnknownEnv)
	nodes, err := m.startNodes()
	if err != nil {
		return err
	}
	metrics := server.NewMetrics()
	if m.logOut != nil {
		metrics.LogLinesDropped(m.logOut.Dropped)
	}
	if err := m.openCoordinator(nodes, metrics); err != nil {
		return err
	}
	m.logCluster(nodes)
	if cert != nil {
		logCert(m.Log.Info(), cert).Str("file", c.TLSCert).Msg("TLS certificate loaded")
	}
	// Dial every node before listening, so the first requests do not pay for it.
	m.coord.Warm(context.Background(), time.Second)
	// Two URLs of one server would be two votes of it: refuse to start.
	ictx, cancel := context.WithTimeout(context.Background(), identityWait)
	err = m.coord.CheckIdentities(ictx)
	cancel()
	if err != nil {
		return &UsageError{Err: fmt.Errorf("%w; give each Redis server once in --redis", err)}
	}

	if m.keys.Len() > 0 {
		m.Log.Info().Int("keys", m.keys.Len()).Bool("metrics_auth", c.MetricsAuth).
			Msg("API keys loaded: every /locks and /semaphores request needs Authorization: Bearer <key>")
	}
	m.srv = server.New(m.serverConfig(metrics))
	m.http = m.httpServer(tlsConfig)
	if err := m.serveDebug(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", c.Listen, err)
	}
	conns := m.connLimiter(ln, len(nodes))
	m.http.ConnState = conns.ConnState
	m.ln = conns
	m.Log.Info().Str("addr", ln.Addr().String()).Bool("tls", tlsConfig != nil).Msg("listening")
	if !isLoopback(ln.Addr()) && m.keys.Len() == 0 {
		m.Log.Warn().Str("addr", ln.Addr().String()).
			Msg("listening beyond loopback without API keys: anyone who can reach this port can take and release locks; give --api-keys-file (make keys with 'redlockd keygen')")
	}

	m.served = make(chan struct{})
	go m.serve(tlsConfig != nil)
	return nil
}

// serve serves the API on m.ln until Close (ServeTLS with useTLS), then
// closes m.served.
func (m *Main) serve(useTLS bool) {
	defer close(m.served)
	var err error
	if useTLS {
		err = m.http.ServeTLS(m.ln, "", "")
	} else {
		err = m.http.Serve(m.ln)
	}
	if !errors.Is(err, http.ErrServerClosed) {
		m.serveErr = err
	}
}

// openCoordinator starts m's coordinator on nodes, its events reported to
// metrics, and to the tracer (spans and span events) when the configuration
// asks for traces.
func (m *Main) openCoordinator(nodes []*redis.Options, metrics *server.Metrics) (err error) {
	opts := m.Config.redlockOptions()
	rlog := m.Log.With().Str("component", "redlock").Logger()
	opts.Logger = &rlog
	opts.Observer = metrics
	if m.Config.Tracing {
		opts.Observer = redlock.Observers(metrics, spanEvents{})
		if m.tracer, err = newTracerProvider(context.Background(), Version()); err != nil {
			return err
		}
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { m.Log.Warn().Err(err).Msg("OpenTelemetry") }))
		opts.ClientHook = traceNodes(m.tracer)
		m.Log.Info().Msg("OpenTelemetry tracing on: spans go to the OTLP/HTTP endpoint of the OTEL_EXPORTER_OTLP_* variables")
	}
	m.coord, err = redlock.New(nodes, opts)
	if err != nil {
		if errors.Is(err, redlock.ErrInvalid) {
			return &UsageError{Err: err}
		}
		return fmt.Errorf("start coordinator: %w", err)
	}
	return nil
}

// serverConfig is the configuration of the API's handler.
func (m *Main) serverConfig(metrics *server.Metrics) server.Config {
	c := m.Config
	return server.Config{
		Locker:      m.coord,
		Log:         m.Log,
		DefaultTTL:  c.DefaultTTL,
		MaxTTL:      c.MaxTTL,
		MaxWait:     c.MaxWait,
		MaxWaiters:  c.MaxWaiters,
		Keys:        m.keys,
		MetricsAuth: c.MetricsAuth,
		Metrics:     metrics,
		Version:     Version(),
		Tracer:      tracerOrNil(m.tracer),

		MaxWaitersPerNamespace: c.MaxWaitersPerNamespace,
	}
}

// httpServer returns the HTTP server of the API, with its limits.
func (m *Main) httpServer(tlsConfig *tls.Config) *http.Server {
	c := m.Config
	return &http.Server{
		Handler:           m.srv.Handler(),
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		ReadTimeout:       c.ReadHeaderTimeout + bodyReadTimeout,
		WriteTimeout:      c.MaxWait + writeTimeoutMargin,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    server.MaxHeaderBytes,
		ErrorLog:          httpErrorLog(m.Log),
		// OPTIONS * goes to the API too (a problem with a request id), not
		// to net/http's bare 200.
		DisableGeneralOptionsHandler: true,
	}
}

// serveDebug serves net/http/pprof, and nothing else, on --debug-listen, if
// given.
func (m *Main) serveDebug() error {
	addr := m.Config.DebugListen
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--debug-listen: %w", err)
	}
	// chi's profiler router, less the command line (also under expvar's
	// /debug/vars): it may hold a Redis password.
	r := chi.NewRouter()
	r.Mount("/debug", middleware.Profiler())
	r.Handle("/debug/pprof/cmdline", http.NotFoundHandler())
	r.Handle("/debug/vars", http.NotFoundHandler())
	m.debug = &http.Server{Handler: r, ReadHeaderTimeout: m.Config.ReadHeaderTimeout,
		ErrorLog: httpErrorLog(m.Log)}
	go func() { _ = m.debug.Serve(ln) }() // returns when closeAll closes it
	e := m.Log.Info()
	if !isLoopback(ln.Addr()) {
		e = m.Log.Warn()
	}
	e.Str("addr", ln.Addr().String()).Msg("debug listening: pprof on /debug/pprof/")
	return nil
}

// connLimiter returns the limiter of the client connections, its cap lowered
// to fit the open-files limit (see connLimit), which it logs.
func (m *Main) connLimiter(ln net.Listener, nodes int) *connLimiter {
	c := m.Config
	limit, nofile := connLimit(c.MaxConnections, nodes, c.DevMode())
	if limit < c.MaxConnections {
		m.Log.Warn().Int("max_connections", limit).Uint64("open_files_limit", nofile).
			Msgf("--max-connections %d lowered to %d to leave room under the open-files limit (ulimit -n) for the Redis connections; raise the limit to allow more",
				c.MaxConnections, limit)
	}
	return newConnLimiter(ln, limit, m.Log.With().Str("component", "http").Logger())
}

// Addr returns the host:port listened on once Open has returned; "" before.
func (m *Main) Addr() string {
	if m.ln == nil {
		return ""
	}
	return m.ln.Addr().String()
}

// Close shuts down gracefully: waiting acquires and /readyz get 503, then
// in-flight requests finish (for at most ShutdownTimeout), then the
// coordinator and the dev nodes close. It is safe to call more than once.
func (m *Main) Close() error {
	m.closeOnce.Do(func() { m.closeErr = m.closeAll() })
	return m.closeErr
}

func (m *Main) closeAll() error {
	var errs []error
	if m.srv != nil {
		m.srv.BeginShutdown()
	}
	if m.http != nil && m.ln != nil {
		timeout := cmp.Or(max(m.ShutdownTimeout, 0), defaultShutdownTimeout)
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err := m.http.Shutdown(ctx)
		cancel()
		if err != nil {
			m.Log.Warn().Err(err).Dur("timeout", timeout).Msg("graceful shutdown timed out: closing the remaining connections")
			errs = append(errs, fmt.Errorf("graceful shutdown: %w", err))
			_ = m.http.Close()
		}
		<-m.served
		if m.serveErr != nil {
			errs = append(errs, fmt.Errorf("serve: %w", m.serveErr))
		}
	}
	if m.debug != nil {
		_ = m.debug.Close() // a profile being taken is cut short
	}
	if m.coord != nil {
		if err := m.coord.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close coordinator: %w", err))
		}
		m.coord = nil
	}
	if m.tracer != nil {
		// The spans still batched are sent, for at most traceFlushTimeout.
		ctx, cancel := context.WithTimeout(context.Background(), traceFlushTimeout)
		err := m.tracer.Shutdown(ctx)
		cancel()
		if err != nil {
			m.Log.Warn().Err(err).Msg("OpenTelemetry: spans lost at shutdown")
		}
		m.tracer = nil
	}
	m.dev.Close()
	m.dev = nil
	if m.ln != nil {
		m.Log.Info().Msg("stopped")
	}
	if m.logOut != nil {
		_ = m.logOut.Close() // every line logged so far is written
		m.logOut = nil
	}
	return errors.Join(errs...)
}

// isLoopback reports whether addr is a loopback IP address. The unspecified
// address (":8080", "0.0.0.0") is not.
func isLoopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}
