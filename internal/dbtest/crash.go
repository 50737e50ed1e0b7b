package dbtest

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// StopImmediate stops a PostgreSQL server the way "pg_ctl stop -m
// immediate" does: SIGQUIT to the postmaster, which tells every backend to
// exit at once, without a shutdown checkpoint and without flushing the WAL
// buffers in shared memory. What was not yet written out is lost, and the
// next Start runs crash recovery. It waits until the server has exited; if it
// has not after 30 s it is killed and StopImmediate returns an error. On a
// MariaDB server, which has no such mode, it is [Server.Kill].
func (s *Server) StopImmediate() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kind != "PostgreSQL" {
		return s.killLocked()
	}
	if !s.runningLocked() {
		return nil
	}
	if err := s.cmd.Process.Signal(syscall.SIGQUIT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("dbtest: stop -m immediate %s: %w", s.kind, err)
	}
	t := time.NewTimer(stopTimeout)
	defer t.Stop()
	select {
	case <-s.exited:
		return nil
	case <-t.C:
		s.killLocked()
		return fmt.Errorf("dbtest: %s on %s ignored SIGQUIT for %v; killed it", s.kind, s.Addr(), stopTimeout)
	}
}
