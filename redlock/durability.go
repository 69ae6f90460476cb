package redlock

import (
	"cmp"
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// durability is what a node's configuration says of its writes across a
// restart, read with CONFIG GET appendonly and appendfsync: with
// appendonly yes and appendfsync always, Redis writes every command to its
// append-only file and fsyncs it before answering, and loads the file when
// it starts, so a restarted node still holds every lock key and fence it
// acknowledged (the Redlock description's "fsync=always").
type durability struct {
	known bool // read; false also when CONFIG was refused
	// refused is CONFIG's error reply's first word (renamed or forbidden
	// by ACL): a node that hides its settings is taken not to be durable.
	refused                 string
	appendonly, appendfsync string
}

// durable reports whether the node keeps every acknowledged write across a
// restart.
func (d durability) durable() bool {
	return d.known && d.appendonly == "yes" && d.appendfsync == "always"
}

// String describes d in a few words, e.g. "appendonly yes, appendfsync everysec".
func (d durability) String() string {
	switch {
	case d.refused != "":
		return "CONFIG GET refused (" + d.refused + "): persistence unknown"
	case !d.known:
		return "persistence not read"
	}
	return fmt.Sprintf("appendonly %s, appendfsync %s", orUnknown(d.appendonly), orUnknown(d.appendfsync))
}

func orUnknown(s string) string {
	if s == "" {
		return "?"
	}
	return s
}

// configCmds are the queued CONFIG GETs of a durability read (nil with a
// quarantine mode that does not need one).
type configCmds struct{ aof, fsync *redis.MapStringStringCmd }

// queueConfig queues the CONFIG GETs of a durability read on p, with
// QuarantineAuto only. Two commands: Redis 6 takes one parameter.
func (n *node) queueConfig(ctx context.Context, p redis.Pipeliner) configCmds {
	if n.opts.Quarantine != QuarantineAuto {
		return configCmds{}
	}
	return configCmds{aof: p.ConfigGet(ctx, "appendonly"), fsync: p.ConfigGet(ctx, "appendfsync")}
}

// durability reads the queued CONFIG GETs' answers.
func (c configCmds) durability() durability {
	if c.aof == nil {
		return durability{}
	}
	for _, cmd := range []*redis.MapStringStringCmd{c.aof, c.fsync} {
		if err := cmd.Err(); err != nil {
			return durability{refused: cmp.Or(errCode(err), "no answer")}
		}
	}
	return durability{known: true, appendonly: c.aof.Val()["appendonly"], appendfsync: c.fsync.Val()["appendfsync"]}
}

// failed reports whether one of the queued commands failed: its error
// says nothing of whether the node is up.
func (c configCmds) failed() bool {
	return c.aof != nil && (c.aof.Err() != nil || c.fsync.Err() != nil)
}
