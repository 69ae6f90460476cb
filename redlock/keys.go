package redlock

// Keys. Every key of a resource is made by key, from the key prefix, the
// key's kind, the namespace and the resource; each script's KEYS, in the
// order the script reads them, come from one method of the resource's key
// set (lockKeys for a lock, semaphoreKeys for a semaphore).

// key is the key of kind (lock, meta, …) for resource in namespace: the one
// place a key is made. Names never contain '/', so namespace and resource
// cannot collide across namespaces.
func (c *Coordinator) key(kind, namespace, resource string) string {
	return c.opts.KeyPrefix + kind + ":" + namespace + "/" + resource
}

// lockKeys are the keys of a lock on one resource.
type lockKeys struct {
	// Lock is the lock's record: its writer with its fences and owner, or
	// a marker of its readers, or a tombstone of its last releases; its
	// waiting mark (see rec_read in prelude.lua).
	Lock    string
	Fence   string // the resource's fence counter (see fence.lua)
	Readers string // the readers: token → expiry on the node's clock (see read_acquire.lua)
	RMeta   string // the readers' records: <token>:owner, :fence, :nf
	WWait   string // the waiting writers, which keep new readers out
}

// lockKeysOf returns the keys of the lock on resource in namespace.
func (c *Coordinator) lockKeysOf(namespace, resource string) lockKeys {
	return lockKeys{
		Lock: c.key("lock", namespace, resource), Fence: c.key("fence", namespace, resource),
		Readers: c.key("readers", namespace, resource), RMeta: c.key("rmeta", namespace, resource),
		WWait: c.key("wwait", namespace, resource),
	}
}

// scriptKeys are a key set's KEYS for each script that a lock and a
// semaphore's permits share, in the order the scripts take them.
type scriptKeys interface {
	// queue is the lock key that names the queue of waiters (see waitHub).
	queue() string
	wwait() string     // the waiting writers' key (a semaphore's never exists)
	acquire() []string // acquire.lua, read_acquire.lua (and each resource's of multi_acquire.lua)
	commit() []string  // commit.lua
	extend() []string  // extend.lua
	reassert() []string
	release() []string
	inspect() []string
}

func (k lockKeys) queue() string { return k.Lock }
func (k lockKeys) wwait() string { return k.WWait }

func (k lockKeys) acquire() []string {
	return []string{k.Lock, k.Fence, k.Readers, k.RMeta, k.WWait}
}

func (k lockKeys) commit() []string   { return []string{k.Lock, k.Fence, k.Readers, k.RMeta} }
func (k lockKeys) extend() []string   { return []string{k.Lock, k.Readers, k.RMeta} }
func (k lockKeys) reassert() []string { return []string{k.Lock, k.Fence, k.Readers, k.RMeta} }

// release is release.lua's KEYS: a lock remembers its releases in its record.
func (k lockKeys) release() []string { return []string{k.Lock, k.Readers, k.RMeta} }

func (k lockKeys) inspect() []string { return []string{k.Lock, k.Readers, k.RMeta} }

// semaphoreKeys are the keys of a semaphore: Permit, the keys of a lock
// named name + "#", whose lock key is the prefix of its permits' (permit i:
// prefix + i), and the index of its permits on a node (see permits.lua).
// Names never contain '#'. Permit's readers, rmeta and wwait keys never
// exist: a semaphore has no readers, and its waiters never enter wwait. A
// waiter waits for any permit, so the semaphore has one waiting key; and a
// released permit leaves the index, so the semaphore remembers its last
// releases in a key of its own (see remember in permits.lua).
type semaphoreKeys struct {
	Permit   lockKeys
	Waiting  string // set while someone waits for a permit: releases are announced
	Released string // the fingerprints of its last releases' tokens, newest first (a list)
	Limit    string // the limit of the permits held on the node
	Permits  string // each permit held → when it expires
	Holders  string // each holder's token → its permit
}

// semaphoreKeysOf returns the keys of the semaphore name in namespace.
func (c *Coordinator) semaphoreKeysOf(namespace, name string) semaphoreKeys {
	name += "#"
	return semaphoreKeys{
		Permit:  c.lockKeysOf(namespace, name),
		Waiting: c.key("waiting", namespace, name), Released: c.key("released", namespace, name),
		Limit: c.key("limit", namespace, name), Permits: c.key("permits", namespace, name),
		Holders: c.key("holders", namespace, name),
	}
}

// index appends the index's keys to keys: every permit script takes them
// after its lock script's KEYS (see permits.lua).
func (k semaphoreKeys) index(keys ...string) []string {
	return append(keys, k.Limit, k.Permits, k.Holders)
}

func (k semaphoreKeys) queue() string      { return k.Permit.Lock }
func (k semaphoreKeys) wwait() string      { return k.Permit.WWait }
func (k semaphoreKeys) acquire() []string  { return k.index(append(k.Permit.acquire(), k.Waiting)...) }
func (k semaphoreKeys) commit() []string   { return k.index(k.Permit.commit()...) }
func (k semaphoreKeys) extend() []string   { return k.index(k.Permit.extend()...) }
func (k semaphoreKeys) reassert() []string { return k.index(k.Permit.reassert()...) }
func (k semaphoreKeys) release() []string {
	return k.index(append(k.Permit.release(), k.Waiting, k.Released)...)
}

// inspect is permit_inspect.lua's KEYS.
func (k semaphoreKeys) inspect() []string { return k.index(k.Permit.Lock) }

// handOver is permit_handover.lua's KEYS.
func (k semaphoreKeys) handOver() []string {
	return k.index(k.Permit.Lock, k.Permit.Fence, k.Waiting, k.Released)
}
