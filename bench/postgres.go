package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/redlockd/redlockd/internal/redistest"
)

// Postgres advisory locks are the comparison for a lock service whose server
// queues its waiters: the tool starts a postgres of its own, as it starts
// the redis-servers, when Debian's postgresql is installed
// (scripts/install-postgres.sh), and locks through pgx.

// pgServer is the tool's postgres: its postmaster's PID and how to connect.
type pgServer struct {
	pid  int
	dsn  string
	stop func() // stops it by PID and removes its directory
}

// pgBinDir is the directory of postgres and initdb: $POSTGRES_BIN, the one
// of postgres in PATH, or Debian's /usr/lib/postgresql/<version>/bin of the
// newest version installed; "" if none.
func pgBinDir() string {
	if dir := os.Getenv("POSTGRES_BIN"); dir != "" {
		return dir
	}
	if p, err := exec.LookPath("postgres"); err == nil {
		return filepath.Dir(p)
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	slices.SortFunc(dirs, func(a, b string) int { return cmp.Compare(pgVersion(a), pgVersion(b)) })
	if len(dirs) == 0 {
		return ""
	}
	return filepath.Dir(dirs[len(dirs)-1])
}

// pgVersion is the major version in Debian's path of postgres, 0 if none.
func pgVersion(path string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
	return v
}

// errNoPostgres says why the tool runs no postgres.
var errNoPostgres = errors.New("bench: postgres not installed (bash scripts/install-postgres.sh installs Debian's postgresql)")

// startPostgres starts a postgres on a free loopback port for at most
// maxConns connections, in a new temporary directory, trusting local
// connections of the user bench. Postgres refuses to run as root: as root it
// runs as the user postgres that Debian's package creates. It returns
// errNoPostgres (joined with the cause) when postgres is not installed or
// has no user to run as.
func startPostgres(ctx context.Context, maxConns int) (_ *pgServer, err error) {
	bin := pgBinDir()
	if bin == "" {
		return nil, errNoPostgres
	}
	if _, err := os.Stat(filepath.Join(bin, "postgres")); err != nil {
		return nil, errors.Join(errNoPostgres, err)
	}
	attr := &syscall.SysProcAttr{}
	uid, gid := -1, -1
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, errors.Join(errNoPostgres, fmt.Errorf("running as root, and no user postgres to run it as: %w", err))
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		attr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	dir, err := os.MkdirTemp("", "redlockd-bench-postgres-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "bench", "--auth", "trust", "--no-sync", "-E", "UTF8")
	initdb.Dir, initdb.SysProcAttr = dir, attr
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	for range 5 { // another process may take the port before postgres binds it
		port, err := redistest.FreePort()
		if err != nil {
			return nil, err
		}
		var s *pgServer
		if s, err = spawnPostgres(ctx, bin, dir, port, maxConns, attr); err == nil {
			return s, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
	}
	return nil, err
}

// spawnPostgres runs postgres on data in dir, listening on port of
// 127.0.0.1 only (and a Unix socket in dir), and waits, 15s at most, until
// it answers. Nothing is synced to disk: it holds nothing worth keeping.
func spawnPostgres(ctx context.Context, bin, dir string, port, maxConns int, attr *syscall.SysProcAttr) (*pgServer, error) {
	logPath := filepath.Join(dir, fmt.Sprintf("postgres-%d.log", port))
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", filepath.Join(dir, "data"), "-p", strconv.Itoa(port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections="+strconv.Itoa(maxConns),
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	cmd.Dir, cmd.SysProcAttr, cmd.Stdout, cmd.Stderr = dir, attr, log, log
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s := &pgServer{pid: cmd.Process.Pid, dsn: fmt.Sprintf("postgres://bench@127.0.0.1:%d/postgres?sslmode=disable", port)}
	// SIGQUIT: an immediate shutdown, whose postmaster stops its backends
	// (SIGKILL would leave them to notice it gone).
	s.stop = func() {
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		os.RemoveAll(dir)
	}
	ready, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for ; ; time.Sleep(50 * time.Millisecond) { // polling for readiness: no event to await
		pool, err := pgxpool.New(ready, s.dsn)
		if err == nil {
			err = pool.Ping(ready)
			pool.Close()
		}
		select {
		case <-exited:
			out, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("postgres on port %d exited at start: %s", port, out)
		default:
		}
		if err == nil {
			return s, nil
		}
		if ready.Err() != nil {
			_ = cmd.Process.Kill()
			<-exited
			out, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("postgres on port %d not ready: %v: %s", port, err, out)
		}
	}
}

// warm opens n connections of pool before the run, so that what postgres
// spends starting a backend for each (a process, far more than a Redis
// connection costs its node) is not counted as the cycles'.
func warm(pool *pgxpool.Pool, n int) error {
	var conns []*pgxpool.Conn
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range n {
		c, err := pool.Acquire(context.Background())
		if err != nil {
			return fmt.Errorf("postgres: connection %d of %d: %w", len(conns)+1, n, err)
		}
		conns = append(conns, c)
	}
	return nil
}

// advisory locks res with pg_advisory_lock, which waits until the lock is
// free, on a connection of pool that it keeps until the lock's
// pg_advisory_unlock (an advisory lock is its session's). The key is the
// 64-bit FNV-1a hash of res.
func advisory(pool *pgxpool.Pool) locker {
	return func(ctx context.Context, res string) (func(context.Context) error, error) {
		h := fnv.New64a()
		h.Write([]byte(res))
		key := int64(h.Sum64())
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		// A lock call cut off by ctx closes its connection, and so frees
		// a lock it may have got.
		if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
			conn.Release()
			return nil, err
		}
		return func(ctx context.Context) error {
			defer conn.Release()
			var freed bool
			err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", key).Scan(&freed)
			if err == nil && !freed {
				err = errors.New("pg_advisory_unlock: not held")
			}
			return err
		}, nil
	}
}
