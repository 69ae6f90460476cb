package redlock

import (
	"embed"
	"regexp"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed *.lua
var lua embed.FS

// The Lua scripts of a lock, each run by SHA (EVALSHA, falling back to EVAL
// on NOSCRIPT) and each made by script from its file, the lock script it
// runs (if it wraps one) and the prelude's functions it calls. A kind whose
// rounds run a script of its own makes it in its own file, as these are
// made: reader.go, multi.go, permit.go.
var (
	scriptAcquire  = script("acquire.lua")
	scriptCommit   = script("commit.lua")
	scriptRelease  = script("release.lua")
	scriptExtend   = script("extend.lua")
	scriptReassert = script("reassert.lua")
	scriptInspect  = script("inspect.lua")
)

// scripts are all the scripts above (Warm loads them): script adds each.
var scripts []*redis.Script

// bodyLine is where a wrapper (a permit script, multi_acquire.lua) runs a
// lock script (as a function); includeLine is where a file takes another
// (permits.lua; fence.lua into the prelude).
var (
	bodyLine    = regexp.MustCompile(`(?m)^-- BODY.*$`)
	includeLine = regexp.MustCompile(`(?m)^-- INCLUDE (\S+)$`)
)

// script is the script of file (see compose), added to scripts.
func script(file string, body ...string) *redis.Script {
	s := redis.NewScript(compose(file, body...))
	scripts = append(scripts, s)
	return s
}

// compose is the source of file: with the lock script of file body (if
// given) in place of its "-- BODY" line, the files it includes in place of
// their "-- INCLUDE" lines, and the prelude's functions it calls before it.
func compose(file string, body ...string) string {
	src := embedded(file)
	if len(body) > 0 {
		if !bodyLine.MatchString(src) {
			panic("redlock: embedded script " + file + " has no BODY line") // cannot happen
		}
		src = bodyLine.ReplaceAllLiteralString(src, embedded(body[0]))
	}
	return withPrelude(include(src))
}

func embedded(name string) string {
	b, err := lua.ReadFile(name)
	if err != nil {
		panic(err) // embedded: cannot happen
	}
	return string(b)
}

// include puts the embedded file named by each "-- INCLUDE name" line of
// src in its place.
func include(src string) string {
	return includeLine.ReplaceAllStringFunc(src, func(line string) string {
		return embedded(includeLine.FindStringSubmatch(line)[1])
	})
}

// preludeFunc is a function of prelude.lua: its name, a pattern that finds
// a call of it, and its source.
type preludeFunc struct {
	name string
	call *regexp.Regexp
	src  string
}

// prelude is prelude.lua's functions in its order, each one a "local
// function" up to the "end" that starts a line.
var prelude = cutPrelude(include(embedded("prelude.lua")))

var preludeDef = regexp.MustCompile(`(?ms)^local function (\w+)\(.*?^end\n`)

func cutPrelude(src string) []preludeFunc {
	var fs []preludeFunc
	for _, m := range preludeDef.FindAllStringSubmatch(src, -1) {
		fs = append(fs, preludeFunc{name: m[1], call: regexp.MustCompile(`\b` + m[1] + `\(`), src: m[0]})
	}
	// The rest is comments: a statement would be lost.
	for line := range strings.Lines(preludeDef.ReplaceAllString(src, "")) {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "--") {
			panic("redlock: prelude.lua: a line outside its functions: " + l) // cannot happen
		}
	}
	return fs
}

// withPrelude is src with the prelude's functions that it calls, and those
// they call, before it. A function calls only those above it, so one pass
// from the last up finds them all.
func withPrelude(src string) string {
	need := make([]bool, len(prelude))
	calls := src
	for i := len(prelude) - 1; i >= 0; i-- {
		if prelude[i].call.MatchString(calls) {
			need[i] = true
			calls += prelude[i].src
		}
	}
	var b strings.Builder
	for i, f := range prelude {
		if need[i] {
			b.WriteString(f.src)
		}
	}
	b.WriteString(src)
	return b.String()
}
