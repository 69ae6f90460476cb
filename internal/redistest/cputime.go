package redistest

import (
	"fmt"
	"time"

	"github.com/prometheus/procfs"
)

// CPUTime is the CPU time the process pid has used, all its threads
// (utime + stime of /proc/<pid>/stat, in clock ticks: 10ms at the usual 100
// a second, so a run of a few seconds resolves a few milliseconds): of a
// node (Server.PID), or of any process a test or the bench measures.
func CPUTime(pid int) (time.Duration, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d: %w", pid, err)
	}
	st, err := p.Stat()
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return time.Duration(st.CPUTime() * float64(time.Second)), nil
}
