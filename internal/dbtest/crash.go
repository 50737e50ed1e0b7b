package dbtest

import "syscall"

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
	return s.signalStopLocked(syscall.SIGQUIT, "stop -m immediate", "SIGQUIT")
}
