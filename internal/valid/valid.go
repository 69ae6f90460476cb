// Package valid holds the rules of the API contract for lock names and
// tokens (SPEC §2), in one place for package redlock, the server and the Go
// client, which must not import redlock (it would link go-redis).
package valid

import "strings"

// MaxName is the longest resource or namespace name; MinToken and MaxToken
// bound a client-chosen token's length.
const (
	MaxName  = 200
	MinToken = 22
	MaxToken = 128
)

// Name reports whether s is a valid resource or namespace name: 1–200
// characters of [A-Za-z0-9._:-], other than "." and "..". (HTTP clients
// normalise those away as path segments, so a lock named so could not be
// released through a URL.)
func Name(s string) bool {
	return s != "." && s != ".." && chars(s, 1, MaxName, &nameChars)
}

// Token reports whether s is a valid client-chosen token: 22–128
// characters of [A-Za-z0-9_-].
func Token(s string) bool { return chars(s, MinToken, MaxToken, &tokenChars) }

// nameChars and tokenChars are the bytes names and tokens may have.
var nameChars, tokenChars = charSet("._:-"), charSet("_-")

// charSet returns the set of the ASCII letters, digits and bytes of extra.
func charSet(extra string) (set [256]bool) {
	for c := range 256 {
		set[c] = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(extra, byte(c)) >= 0
	}
	return set
}

// chars reports whether s is min to max bytes of set. (The gateway checks
// a name and often a token on every request: a table lookup per byte, no
// regexp.)
func chars(s string, min, max int, set *[256]bool) bool {
	if len(s) < min || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !set[s[i]] {
			return false
		}
	}
	return true
}
