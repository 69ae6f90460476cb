package redlock

// keys returns the lock, meta, fence and waiting keys of a resource, the
// prefix of its release tombstones (see releaseKeys), then its readers,
// rmeta and wwait keys (see read_acquire.lua). Names never contain '/', so
// namespace and resource cannot collide across namespaces.
func (c *Coordinator) keys(namespace, resource string) []string {
	base := namespace + "/" + resource
	p := c.opts.KeyPrefix
	return []string{p + "lock:" + base, p + "meta:" + base, p + "fence:" + base, p + "waiting:" + base, p + "released:" + base,
		p + "readers:" + base, p + "rmeta:" + base, p + "wwait:" + base}
}

// pick returns the keys at positions idx: the KEYS of a script.
func pick(keys []string, idx ...int) []string {
	out := make([]string, len(idx))
	for i, j := range idx {
		out[i] = keys[j]
	}
	return out
}

// releaseKeys are the keys release.lua takes: lock, meta, waiting, the
// tombstone of token's release, released:<ns>/<resource>/<token> (a token
// never contains '/'), readers and rmeta.
func releaseKeys(keys []string, token string) []string {
	return []string{keys[0], keys[1], keys[3], keys[4] + "/" + token, keys[5], keys[6]}
}

// semKeys returns a semaphore's keys: those of a lock named name + "#",
// whose lock and meta keys are the prefixes of its permits' (permit i:
// prefix + i), then the index of its permits on a node (see permits.lua):
// its limit key (the limit of the permits held on the node), its permits
// key (each permit held → when it expires) and its holders key (each
// holder's token → its permit). Names never contain '#'. Its readers, rmeta
// and wwait keys never exist: a semaphore has no readers, and its waiters
// never enter wwait.
func (c *Coordinator) semKeys(namespace, name string) []string {
	base := namespace + "/" + name + "#"
	p := c.opts.KeyPrefix
	return append(c.keys(namespace, name+"#"), p+"limit:"+base, p+"permits:"+base, p+"holders:"+base)
}

// The positions of the index's keys in semKeys: limit, permits and
// holders, which every permit script takes after a lock script's KEYS.
const (
	semLimit = 8 + iota
	semPermits
	semHolders
)
