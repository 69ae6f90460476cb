package main

import (
	"context"
	"fmt"
	"io"
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

// httpErrorLog sends net/http's own error log (accept errors, TLS handshake
// failures, panics) to zerolog; handshake failures from port scanners are
// only worth a debug line.
type httpErrorLog struct{ log zerolog.Logger }

func (l httpErrorLog) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	if strings.Contains(msg, "TLS handshake error") {
		l.log.Debug().Str("component", "http").Msg(msg)
	} else {
		l.log.Warn().Str("component", "http").Msg(msg)
	}
	return len(p), nil
}

// stdLog sends the standard library's log lines (zerolog's diode reports a
// collision through it) to zerolog as warnings.
type stdLog struct{ log zerolog.Logger }

func (l stdLog) Write(p []byte) (int, error) {
	l.log.Warn().Msg(strings.TrimSpace(string(p)))
	return len(p), nil
}

// redisLog sends go-redis's own log lines (dial failures, ...) to zerolog as
// warnings. They name nodes by host:port, never with credentials.
type redisLog struct{ log zerolog.Logger }

func (l redisLog) Printf(_ context.Context, format string, v ...any) {
	l.log.Warn().Msg(strings.TrimSpace(fmt.Sprintf(format, v...)))
}
