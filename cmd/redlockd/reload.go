package main

import (
	"crypto/tls"
	"errors"
	"os"
	"time"

	"github.com/redlockd/redlockd/server"
	"github.com/rs/zerolog"
)

// Reload reads the API keys file and the TLS certificate and key again
// (SIGHUP) and puts each that loads in place of the old one, for the
// requests and handshakes that follow. One that does not load is logged,
// the old one stays, and Reload returns why. What was not configured at
// Open stays off.
func (m *Main) Reload() error {
	c := m.Config
	var errs []error
	if m.keys == nil && m.cert.Load() == nil {
		m.Log.Info().Msg("nothing to reload: no --api-keys-file and no --tls-cert")
	}
	if m.keys != nil {
		if keys, err := c.loadKeys(); err != nil {
			m.Log.Error().Err(err).Msg("API keys not reloaded: the previous keys stay in use")
			errs = append(errs, err)
		} else {
			m.keys.Replace(keys)
			m.Log.Info().Str("file", c.APIKeysFile).Int("keys", keys.Len()).Msg("API keys reloaded")
		}
	}
	if m.cert.Load() != nil {
		if cert, err := c.loadTLS(); err != nil {
			m.Log.Error().Err(err).Msg("TLS certificate not reloaded: the previous certificate stays in use")
			errs = append(errs, err)
		} else {
			m.cert.Store(cert)
			logCert(m.Log.Info(), cert).Str("file", c.TLSCert).Msg("TLS certificate reloaded")
		}
	}
	return errors.Join(errs...)
}

// tlsConfig returns the TLS configuration of the API with cert, or nil
// without one. The certificate is looked up at each handshake, so that
// Reload can replace it without touching the listener.
func (m *Main) tlsConfig(cert *tls.Certificate) *tls.Config {
	if cert == nil {
		return nil
	}
	m.cert.Store(cert)
	return &tls.Config{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return m.cert.Load(), nil },
		MinVersion:     tls.VersionTLS12,
	}
}

// loadKeys reads and validates the API keys file; nil without one.
func (c Config) loadKeys() (*server.Keys, error) {
	if c.APIKeysFile == "" {
		return nil, nil
	}
	data, err := os.ReadFile(c.APIKeysFile)
	if err != nil {
		return nil, usageErrorf("--api-keys-file: %v", err)
	}
	keys, err := server.ParseKeys(data)
	if err != nil {
		return nil, usageErrorf("--api-keys-file %s: %w", c.APIKeysFile, err)
	}
	return keys, nil
}

// loadTLS loads the certificate and key when both are given; nil otherwise.
// Its errors name the files, never key material. May return a *UsageError.
func (c Config) loadTLS() (*tls.Certificate, error) {
	if c.TLSCert == "" || c.TLSKey == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
	if err != nil {
		return nil, usageErrorf("--tls-cert/--tls-key: %v", err)
	}
	return &cert, nil
}

// logCert adds to e what identifies cert: its subject, names and validity,
// never key material.
func logCert(e *zerolog.Event, cert *tls.Certificate) *zerolog.Event {
	leaf := cert.Leaf
	if leaf == nil {
		return e
	}
	e = e.Str("subject", leaf.Subject.String()).Strs("dns_names", leaf.DNSNames).
		Time("not_before", leaf.NotBefore).Time("not_after", leaf.NotAfter)
	if time.Now().After(leaf.NotAfter) {
		e = e.Bool("expired", true)
	}
	return e
}
