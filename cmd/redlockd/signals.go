package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// Signals. SIGINT and SIGTERM end the context every command gets; a second
// one kills. serve reloads its files on SIGHUP (Main.Run); run forwards
// signals to CMD (runner).

// signalContext returns the context of the command cmd, ended by the first
// SIGINT or SIGTERM; stop releases the signals.
func signalContext(cmd string) (ctx context.Context, stop context.CancelFunc) {
	ctx, stop = signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, restore the default behaviour: a second
		// Ctrl-C kills a shutdown that takes too long.
		<-ctx.Done()
		stop()
	}()
	if cmd == "serve" {
		// SIGHUP reloads keys and certificate once Main.Run listens for
		// it; until then (and after) it must not kill the gateway.
		signal.Ignore(syscall.SIGHUP)
	}
	return ctx, stop
}

// Run opens m unless Open was already called, serves until ctx ends, then
// closes m; nil after a graceful shutdown. SIGHUP calls Reload.
func (m *Main) Run(ctx context.Context) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if m.ln == nil {
		if err := m.Open(); err != nil {
			return err
		}
	}
	for {
		select {
		case <-hup:
			m.Log.Info().Msg("SIGHUP: reloading the API keys file and the TLS certificate")
			_ = m.Reload() // logged
		case <-ctx.Done():
			m.Log.Info().Str("cause", context.Cause(ctx).Error()).Msg("shutting down")
			return m.Close()
		case <-m.served:
			m.Log.Error().AnErr("error", m.serveErr).Msg("HTTP server stopped on its own")
			return m.Close()
		}
	}
}
