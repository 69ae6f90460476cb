package redlock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts, each run by SHA (EVALSHA, falling back to EVAL on NOSCRIPT).
var (
	//go:embed acquire.lua
	acquireLua    string
	scriptAcquire = redis.NewScript(acquireLua)

	//go:embed commit.lua
	commitLua    string
	scriptCommit = redis.NewScript(commitLua)

	//go:embed release.lua
	releaseLua    string
	scriptRelease = redis.NewScript(releaseLua)

	//go:embed extend.lua
	extendLua    string
	scriptExtend = redis.NewScript(extendLua)

	//go:embed reassert.lua
	reassertLua    string
	scriptReassert = redis.NewScript(reassertLua)

	//go:embed inspect.lua
	inspectLua    string
	scriptInspect = redis.NewScript(inspectLua)
)
