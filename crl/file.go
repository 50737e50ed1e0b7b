package crl

import (
	"errors"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlretry/sqlretry"
)

// ReloadInterval is how often a [File] looks at its file's modification
// time, at most: the driver's 30 seconds.
const ReloadInterval = 30 * time.Second

// ParseProperties reads rules from the text of an mssql-jdbc.properties file
// the way the JDBC driver does: a line that starts with "retryExec" or
// "retryConn" (a literal prefix test, so "retryExec2=…" counts and "#…" or
// " retryExec=…" do not) gives the value after its first "="; several lines
// for one property are joined with ";". A matching line without "=" is an
// error naming the line.
func ParseProperties(text string) (exec, conn string, err error) {
	xs, cs, err := readProperties(text)
	if err != nil {
		return "", "", err
	}
	join := func(ls []propLine) string {
		vs := make([]string, len(ls))
		for i, l := range ls {
			vs[i] = l.value
		}
		return strings.Join(vs, ";")
	}
	return join(xs), join(cs), nil
}

type propLine struct {
	n     int // 1-based line number
	value string
}

func readProperties(text string) (exec, conn []propLine, err error) {
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSuffix(line, "\r")
		var dst *[]propLine
		switch {
		case strings.HasPrefix(line, "retryExec"):
			dst = &exec
		case strings.HasPrefix(line, "retryConn"):
			dst = &conn
		default:
			continue
		}
		eq := strings.IndexByte(line, '=')
		if eq < 0 {
			return nil, nil, errorf("line %d: %q has no '='", i+1, line)
		}
		*dst = append(*dst, propLine{n: i + 1, value: line[eq+1:]})
	}
	return exec, conn, nil
}

// File is a rules file in mssql-jdbc.properties format, re-read lazily as
// the JDBC driver does, but held by a value rather than by the process: each
// File, and each Policy using it, has its own rules.
//
// A File is itself a statement [sqlretry.Schedule] (with
// [sqlretry.StatementConsent]); [File.ConnectSchedule] is its connect
// schedule. Both always use the current rules. At most every
// [ReloadInterval], on the first decision after it, the File looks at the
// file's modification time and re-reads it if it changed. A file that no
// longer parses keeps the last good rules in force and [File.Status] reports
// why; a file that was removed means no file rules, as in the driver.
//
// Values set in code win: a non-empty Config.Exec or Config.Conn is used
// instead of the file's lines for that property. The Config's other fields
// (code syntax, filter mode, timeouts) apply to the file's rules too.
//
// A File is safe for concurrent use; between checks a decision takes no lock.
type File struct {
	path string
	code Config
	now  func() time.Time

	// Immutable after NewFile: the code values' parsed rules.
	codeExec Exec
	codeConn Conn

	next atomic.Int64 // unix nanoseconds before which the file is not looked at
	cur  atomic.Pointer[fileState]
	mu   sync.Mutex // serialises reloads
}

type fileState struct {
	exec    *ExecSchedule
	conn    *ConnSchedule
	mod     time.Time // the modification time of the text in force; zero if none
	exists  bool
	checked time.Time
	err     error
}

// FileStatus describes a File's rules in force and its last look at the file.
type FileStatus struct {
	Path    string
	Exec    string    // the statement rules in force, formatted
	Conn    string    // the connection rules in force, formatted
	Exists  bool      // whether the file existed at the last look
	ModTime time.Time // modification time of the file the rules came from; zero if none
	Checked time.Time // when the File last looked at the file
	Err     error     // why the last look failed; the last good rules stay in force
}

// NewFile reads the rules file at path, with c as the values set in code,
// and returns a File that re-reads it lazily. A missing file is not an error
// (no file rules, as in the driver); a file that does not parse, or an
// invalid c, is: at start there are no last good rules to keep. now is the
// clock for the reload interval; nil means time.Now.
func NewFile(path string, c Config, now func() time.Time) (*File, error) {
	if now == nil {
		now = time.Now
	}
	f := &File{path: path, code: c, now: now}
	var err error
	if _, _, err = c.Schedules(); err != nil {
		return nil, err
	}
	f.codeExec, _ = c.Syntax.ParseExec(c.Exec)
	f.codeConn, _ = c.Syntax.ParseConn(c.Conn)
	t := now()
	st, err := f.look(t, nil)
	if err != nil {
		return nil, err
	}
	f.cur.Store(st)
	f.next.Store(t.Add(ReloadInterval).UnixNano())
	return f, nil
}

// look stats and, if it changed since prev, reads the file. It returns the
// new state, or an error when the file exists but cannot be read or parsed.
func (f *File) look(t time.Time, prev *fileState) (*fileState, error) {
	info, err := os.Stat(f.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if prev != nil && !prev.exists && prev.err == nil {
			return &fileState{exec: prev.exec, conn: prev.conn, checked: t}, nil
		}
		return f.build(t, "", time.Time{}, false)
	case err != nil:
		return nil, errorf("%s: %v", f.path, err)
	}
	if prev != nil && prev.exists && info.ModTime().Equal(prev.mod) {
		return &fileState{exec: prev.exec, conn: prev.conn, mod: prev.mod, exists: true, checked: t}, nil
	}
	data, err := os.ReadFile(f.path)
	if err != nil {
		return nil, errorf("%s: %v", f.path, err)
	}
	return f.build(t, string(data), info.ModTime(), true)
}

// build parses the file's text into a state, code values winning.
func (f *File) build(t time.Time, text string, mod time.Time, exists bool) (*fileState, error) {
	xl, cl, err := readProperties(text)
	if err != nil {
		return nil, errorf("%s: %v", f.path, err)
	}
	c := f.code
	x := f.codeExec
	if c.Exec == "" {
		x = Exec{syntax: c.Syntax}
		for _, l := range xl {
			lx, err := c.Syntax.ParseExec(l.value)
			if err == nil && c.QueryTimeout > 0 {
				err = lx.CheckQueryTimeout(c.QueryTimeout)
			}
			if err != nil {
				return nil, errorf("%s:%d: retryExec: %w", f.path, l.n, err)
			}
			x = x.merge(lx)
		}
	}
	cn := f.codeConn
	if c.Conn == "" {
		cn = Conn{syntax: c.Syntax}
		cn.finish()
		for _, l := range cl {
			lc, err := c.Syntax.ParseConn(l.value)
			if err != nil {
				return nil, errorf("%s:%d: retryConn: %w", f.path, l.n, err)
			}
			cn = cn.merge(lc)
		}
	}
	cs, err := cn.Schedule(c.Connect())
	if err != nil {
		return nil, err
	}
	return &fileState{exec: x.Schedule(c.FilterMode), conn: cs, mod: mod, exists: exists, checked: t}, nil
}

// state returns the rules in force, first looking at the file if the
// reload interval has passed.
func (f *File) state() *fileState {
	t := f.now()
	if t.UnixNano() < f.next.Load() {
		return f.cur.Load()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if t.UnixNano() < f.next.Load() {
		return f.cur.Load()
	}
	f.next.Store(t.Add(ReloadInterval).UnixNano())
	prev := f.cur.Load()
	st, err := f.look(t, prev)
	if err != nil {
		// Keep the last good rules and the modification time they came
		// from: the broken file is read again at each look until it is
		// fixed, and keeps being reported.
		st = &fileState{exec: prev.exec, conn: prev.conn, mod: prev.mod, exists: prev.exists, checked: t, err: err}
	}
	f.cur.Store(st)
	return st
}

// Decide implements [sqlretry.Schedule] with the current statement rules.
func (f *File) Decide(fl sqlretry.Failure) (sqlretry.Decision, time.Duration) {
	return f.state().exec.Decide(fl)
}

// ConsentsToReplay implements [sqlretry.StatementConsent] with the current
// statement rules.
func (f *File) ConsentsToReplay(statement, code string) bool {
	return f.state().exec.ConsentsToReplay(statement, code)
}

// ConnectSchedule returns a schedule that decides with the current
// connection rules, for [sqlretry.Config.ConnectSchedule].
func (f *File) ConnectSchedule() sqlretry.Schedule { return fileConn{f} }

// fileConn is the connect schedule of a File: the current connection rules
// and loginTimeout.
type fileConn struct{ f *File }

func (c fileConn) Decide(fl sqlretry.Failure) (sqlretry.Decision, time.Duration) {
	return c.f.state().conn.Decide(fl)
}

// ConnectTimeout implements [sqlretry.ConnectBound].
func (c fileConn) ConnectTimeout() time.Duration { return c.f.state().conn.ConnectTimeout() }

// Apply sets p.Schedule to f and p.ConnectSchedule to f.ConnectSchedule().
func (f *File) Apply(p *sqlretry.Config) {
	p.Schedule, p.ConnectSchedule = f, f.ConnectSchedule()
}

// Status returns the rules in force and the last look at the file, first
// looking at it if the reload interval has passed.
func (f *File) Status() FileStatus {
	st := f.state()
	return FileStatus{
		Path:    f.path,
		Exec:    st.exec.exec.String(),
		Conn:    st.conn.conn.String(),
		Exists:  st.exists,
		ModTime: st.mod,
		Checked: st.checked,
		Err:     st.err,
	}
}

// String describes the File for logs.
func (f *File) String() string {
	st := f.Status()
	s := "crl.File{" + strconv.Quote(f.path) + ", retryExec=" + strconv.Quote(st.Exec) + ", retryConn=" + strconv.Quote(st.Conn)
	if st.Err != nil {
		s += ", error: " + st.Err.Error()
	}
	return s + "}"
}
