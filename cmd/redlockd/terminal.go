package main

import (
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// isTerminal reports whether w is a terminal: colours only go there.
func isTerminal(w io.Writer) bool {
	f, _ := w.(*os.File) // a nil *os.File has an invalid Fd
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// terminalForeground reports whether stdin is a terminal whose foreground
// process group is run's: CMD should then get the terminal, or reading it
// would stop CMD (SIGTTIN) in its own process group.
func terminalForeground() (fd int, ok bool) {
	fd = int(os.Stdin.Fd())
	pgrp, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	return fd, err == nil && pgrp == syscall.Getpgrp()
}

// restoreForeground gives the terminal back to run's process group after
// CMD exited. run is in the background then, so SIGTTOU is ignored meanwhile.
func restoreForeground(fd int) {
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	_ = unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, syscall.Getpgrp())
}
