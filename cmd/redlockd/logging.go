package main

import (
	"context"
	"fmt"
	"io"
	stdlog "log"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

func init() {
	// Log times in UTC with milliseconds (docs/operations.md, logs).
	zerolog.TimeFieldFormat = "2006-01-02T15:04:05.000Z07:00"
	zerolog.TimestampFunc = func() time.Time { return time.Now().UTC() }
}

// newLogger builds the process logger: JSON lines (or console) to w.
func newLogger(w io.Writer, c Config) zerolog.Logger {
	if c.LogFormat == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05.000", NoColor: !isTerminal(w)}
	}
	level, _ := zerolog.ParseLevel(c.LogLevel) // one of logLevels
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}

// libLog sends the lines that a library writes to a standard-library
// logger (net/http's error log: accept errors, TLS handshake failures,
// panics; the Go standard log, through which zerolog's diode reports a
// collision) to zerolog as warnings; handshake failures from port scanners
// are only worth a debug line.
type libLog struct{ log zerolog.Logger }

func (l libLog) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	if strings.Contains(msg, "TLS handshake error") {
		l.log.Debug().Msg(msg)
	} else {
		l.log.Warn().Msg(msg)
	}
	return len(p), nil
}

// httpErrorLog is net/http's error log (http.Server.ErrorLog) of log.
func httpErrorLog(log zerolog.Logger) *stdlog.Logger {
	return stdlog.New(libLog{log.With().Str("component", "http").Logger()}, "", 0)
}

// redisLog sends go-redis's own log lines (dial failures, ...) to zerolog as
// warnings. They name nodes by host:port, never with credentials.
type redisLog struct{ log zerolog.Logger }

func (l redisLog) Printf(_ context.Context, format string, v ...any) {
	l.log.Warn().Msg(strings.TrimSpace(fmt.Sprintf(format, v...)))
}
