package redistest

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Instructions counts the instructions a thread retires, in user space and
// in the kernel apart, from the CPU's own counters (perf_event_open): unlike
// CPU time, the count of the same work barely moves with what else the
// machine runs. Redis runs every command, and every script, on its main
// thread, whose id is the process's. Counting slows the thread where the
// hypervisor traps the counters (docs/measuring.md, What a cycle costs the
// servers).
type Instructions struct {
	user, kernel int // the counters' file descriptors
}

// CountInstructions starts counting the instructions of thread tid. It fails
// where the machine has no such counter (some VMs) or the process may not
// read another's (kernel.perf_event_paranoid, without CAP_PERFMON).
func CountInstructions(tid int) (*Instructions, error) {
	open := func(excludeKernel bool) (int, error) {
		attr := unix.PerfEventAttr{
			Type:   unix.PERF_TYPE_HARDWARE,
			Config: unix.PERF_COUNT_HW_INSTRUCTIONS,
			Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
			Bits:   unix.PerfBitExcludeHv,
		}
		if excludeKernel {
			attr.Bits |= unix.PerfBitExcludeKernel
		} else {
			attr.Bits |= unix.PerfBitExcludeUser
		}
		return unix.PerfEventOpen(&attr, tid, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	}
	user, err := open(true)
	if err != nil {
		return nil, fmt.Errorf("counting the instructions of thread %d: %w", tid, err)
	}
	kernel, err := open(false)
	if err != nil {
		unix.Close(user)
		return nil, fmt.Errorf("counting the instructions of thread %d: %w", tid, err)
	}
	return &Instructions{user: user, kernel: kernel}, nil
}

// Read is the instructions retired so far, in user space and in the kernel.
func (c *Instructions) Read() (user, kernel uint64, err error) {
	read := func(fd int) (uint64, error) {
		var b [8]byte
		if _, err := unix.Read(fd, b[:]); err != nil {
			return 0, err
		}
		return binary.NativeEndian.Uint64(b[:]), nil
	}
	if user, err = read(c.user); err == nil {
		kernel, err = read(c.kernel)
	}
	return user, kernel, err
}

// Close stops counting.
func (c *Instructions) Close() error {
	unix.Close(c.user)
	return unix.Close(c.kernel)
}
