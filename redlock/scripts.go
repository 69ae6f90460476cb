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
	// permits on the node (permits.lua, which each includes).
	permitScripts = map[*redis.Script]*redis.Script{
		scriptAcquire:  wrapScript("permit_acquire.lua", "acquire.lua"),
		scriptCommit:   wrapScript("permit_find.lua", "commit.lua"),
		scriptRelease:  wrapScript("permit_find.lua", "release.lua"),
		scriptExtend:   wrapScript("permit_find.lua", "extend.lua"),
		scriptReassert: wrapScript("permit_reassert.lua", "reassert.lua"),
	}
	scriptPermitInspect  = loadScript("permit_inspect.lua")
	scriptPermitHandover = loadScript("permit_handover.lua")

	scripts = append([]*redis.Script{scriptAcquire, scriptRead, scriptCommit, scriptRelease, scriptExtend, scriptReassert, scriptInspect,
		scriptMulti, scriptPermitInspect, scriptPermitHandover}, slices.Collect(maps.Values(permitScripts))...)
)

// bodyLine is where a wrapper (a permit script, multi_acquire.lua) runs a
// lock script (as a function); includeLine is where a script takes the
// functions of a shared file (fence.lua, permits.lua).
var (
	bodyLine    = regexp.MustCompile(`(?m)^-- BODY.*$`)
	includeLine = regexp.MustCompile(`(?m)^-- INCLUDE (\S+)$`)
)

// wrapScript is the script of file wrapper with the lock script of file
// body in place of its "-- BODY" line.
func wrapScript(wrapper, body string) *redis.Script {
	w, err := lua.ReadFile(wrapper)
	b, err2 := lua.ReadFile(body)
	if err != nil || err2 != nil || !bodyLine.Match(w) {
		panic("redlock: embedded scripts " + wrapper + ", " + body) // cannot happen
	}
	return redis.NewScript(include(bodyLine.ReplaceAllLiteralString(string(w), string(b))))
}

func loadScript(name string) *redis.Script {
	src, err := lua.ReadFile(name)
	if err != nil {
		panic(err) // embedded: cannot happen
	}
	return redis.NewScript(include(string(src)))
}

// include puts the embedded file named by each "-- INCLUDE name" line of
// src in its place.
func include(src string) string {
	return includeLine.ReplaceAllStringFunc(src, func(line string) string {
		b, err := lua.ReadFile(includeLine.FindStringSubmatch(line)[1])
		if err != nil {
			panic("redlock: embedded script " + line) // cannot happen
		}
		return string(b)
	})
}
