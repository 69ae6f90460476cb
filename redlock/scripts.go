package redlock

import (
	"embed"

	"github.com/redis/go-redis/v9"
)

//go:embed *.lua
var lua embed.FS

// The Lua scripts, each run by SHA (EVALSHA, falling back to EVAL on NOSCRIPT).
var (
	scriptAcquire  = loadScript("acquire.lua")
	scriptCommit   = loadScript("commit.lua")
	scriptRelease  = loadScript("release.lua")
	scriptExtend   = loadScript("extend.lua")
	scriptReassert = loadScript("reassert.lua")
	scriptInspect  = loadScript("inspect.lua")
	scripts        = []*redis.Script{scriptAcquire, scriptCommit, scriptRelease, scriptExtend, scriptReassert, scriptInspect}
)

func loadScript(name string) *redis.Script {
	src, err := lua.ReadFile(name)
	if err != nil {
		panic(err) // embedded: cannot happen
	}
	return redis.NewScript(string(src))
}
