// Package valid holds the rules of the API contract for lock names and
// tokens (openapi.yaml), in one place for package redlock, the server and the Go
// client, which must not import redlock (it would link go-redis).
package valid

import (
	"slices"
	"strconv"
	"strings"
)

// MaxName is the longest resource or namespace name; MinToken and MaxToken
// bound a client-chosen token's length.
const (
	MaxName  = 200
	MinToken = 22
	MaxToken = 128
)

// MaxLimit is the largest limit of a semaphore (docs/semaphores.md): each of its
// permits is a lock of its own, and a node's GET of the semaphore reads
// every permit held.
const MaxLimit = 256

// MaxResources is the most resources of one multi-resource lock (docs/several-resources.md):
// a node checks and sets all of them in one script.
const MaxResources = 16

// Resources returns what is wrong with the resources of a multi-resource
// lock, or "": 1–MaxResources valid names, none repeated.
func Resources(rs []string) string {
	if len(rs) == 0 || len(rs) > MaxResources {
		return "resources must name 1-" + strconv.Itoa(MaxResources) + " resources"
	}
	for i, r := range rs {
		if !Name(r) {
			return "each of resources must be 1-" + strconv.Itoa(MaxName) + " characters of [A-Za-z0-9._:-], other than . and .."
		}
		if slices.Contains(rs[:i], r) {
			return "resources must not repeat a resource"
		}
	}
	return ""
}

// Name reports whether s is a valid resource or namespace name: 1–200
// characters of [A-Za-z0-9._:-], other than "." and "..". (HTTP clients
// normalise those away as path segments, so a lock named so could not be
// released through a URL.)
func Name(s string) bool {
	return len(s) >= 1 && len(s) <= MaxName && s != "." && s != ".." && only(s, nameChars)
}

// Token reports whether s is a valid client-chosen token: 22–128
// characters of [A-Za-z0-9_-].
func Token(s string) bool { return len(s) >= MinToken && len(s) <= MaxToken && only(s, tokenChars) }

// The characters of tokens and of names. Every request checks a name or a
// token, a byte at a time: a regular expression's match costs many times
// more (redlock's TestValidNames checks these against the expressions).
const (
	tokenChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
	nameChars  = tokenChars + ".:"
)

// only reports whether every byte of s is one of chars.
func only(s, chars string) bool {
	for i := range len(s) {
		if strings.IndexByte(chars, s[i]) < 0 {
			return false
		}
	}
	return true
}
