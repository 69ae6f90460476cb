package redlock

import (
	"crypto/rand"
	"encoding/base64"
)

// NewToken returns a random lock token: 16 bytes (128 bits) from crypto/rand,
// URL-safe base64 without padding (22 characters).
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error (Go 1.24+).
	return base64.RawURLEncoding.EncodeToString(b[:])
}
