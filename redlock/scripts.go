package redlock

import (
	"embed"
	"maps"
	"regexp"
	"slices"

	"github.com/redis/go-redis/v9"
)

//go:embed *.lua
var lua embed.FS

// The Lua scripts, each run by SHA (EVALSHA, falling back to EVAL on NOSCRIPT).
var (
	scriptAcquire  = loadScript("acquire.lua")
	scriptRead     = loadScript("read_acquire.lua")
	scriptCommit   = loadScript("commit.lua")
	scriptRelease  = loadScript("release.lua")
	scriptExtend   = loadScript("extend.lua")
	scriptReassert = loadScript("reassert.lua")
	scriptInspect  = loadScript("inspect.lua")
	// acquire.lua on several resources, all or nothing (see runMulti)
	scriptMulti = wrapScript("multi_acquire.lua", "acquire.lua")

	// The scripts of a semaphore's permits (see semaphore.go): each runs a
	// lock script on the permit its prelude picks from the index of the
	// permits on the node (permits.lua).
	permitScripts = map[*redis.Script]*redis.Script{
		scriptAcquire:  permitScript("permit_acquire.lua", "acquire.lua"),
		scriptCommit:   permitScript("permit_find.lua", "commit.lua"),
		scriptRelease:  permitScript("permit_find.lua", "release.lua"),
		scriptExtend:   permitScript("permit_find.lua", "extend.lua"),
		scriptReassert: permitScript("permit_reassert.lua", "reassert.lua"),
	}
	scriptPermitInspect  = permitScript("permit_inspect.lua", "")
	scriptPermitHandover = permitScript("permit_handover.lua", "")

	scripts = append([]*redis.Script{scriptAcquire, scriptRead, scriptCommit, scriptRelease, scriptExtend, scriptReassert, scriptInspect,
		scriptMulti, scriptPermitInspect, scriptPermitHandover}, slices.Collect(maps.Values(permitScripts))...)
)

var (
	// bodyLine is where a wrapper (a permit script, multi_acquire.lua)
	// runs a lock script (as a function).
	bodyLine = regexp.MustCompile(`(?m)^-- BODY.*$`)
	// permitsLine is where a permit script takes in permits.lua.
	permitsLine = regexp.MustCompile(`(?m)^-- PERMITS$`)
)

// wrapScript is the script of file wrapper with the lock script of file
// body in place of its "-- BODY" line.
func wrapScript(wrapper, body string) *redis.Script {
	return redis.NewScript(inline(source(wrapper), bodyLine, body))
}

// permitScript is the permit script of file wrapper with permits.lua in
// place of its "-- PERMITS" line and, unless body is "", the lock script of
// file body in place of its "-- BODY" line.
func permitScript(wrapper, body string) *redis.Script {
	src := inline(source(wrapper), permitsLine, "permits.lua")
	if body != "" {
		src = inline(src, bodyLine, body)
	}
	return redis.NewScript(src)
}

// inline is src with the embedded file in place of its line that matches line.
func inline(src string, line *regexp.Regexp, file string) string {
	if len(line.FindAllStringIndex(src, -1)) != 1 {
		panic("redlock: embedded script " + file + ": no single place for it") // cannot happen
	}
	return line.ReplaceAllLiteralString(src, source(file))
}

func source(name string) string {
	src, err := lua.ReadFile(name)
	if err != nil {
		panic(err) // embedded: cannot happen
	}
	return string(src)
}

func loadScript(name string) *redis.Script { return redis.NewScript(source(name)) }
