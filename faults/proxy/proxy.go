package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Mode is what a [Proxy] does to a connection's traffic.
type Mode string

// The proxy's fault modes. The strings are the command's --fault values.
const (
	// Inherit, the zero Mode, makes a per-connection fault follow the
	// proxy-wide one.
	Inherit Mode = ""
	// Pass forwards both directions untouched.
	Pass Mode = "none"
	// Delay holds every chunk of data, in both directions, for the fault's
	// Latency before forwarding it.
	Delay Mode = "latency"
	// Reset resets the connections it is set on at once, and every new
	// connection as soon as it is accepted.
	Reset Mode = "reset"
	// Blackhole stops forwarding: data is held, unanswered, until the fault
	// changes (then it flows again, as after a healed partition) or the
	// connection closes. New connections are accepted and held the same way.
	Blackhole Mode = "blackhole"
	// Refuse resets every new connection as soon as it is accepted (an
	// outage); established connections are left alone.
	Refuse Mode = "refuse"
	// CutAfterCommit forwards a COMMIT to the server, waits until the
	// server's reply begins to arrive (or the proxy's CutWait passes), then
	// closes both sides without forwarding the reply: the server committed,
	// the client sees a broken connection.
	CutAfterCommit Mode = "cut-after-commit"
	// HoldAfterCommit forwards a COMMIT to the server and holds the
	// server's reply, and everything after it on that connection, until
	// the connection's fault changes (then the reply is forwarded) or the
	// connection closes: the server committed, the client waits on a
	// COMMIT that does not answer. Tests use it to end a caller's context
	// while its COMMIT is in flight.
	HoldAfterCommit Mode = "hold-after-commit"
)

// A Fault is a Mode and, for Delay, its latency.
type Fault struct {
	Mode    Mode
	Latency time.Duration
}

// ParseFault parses the command's --fault syntax: none, latency=DURATION,
// reset, blackhole, refuse, cut-after-commit, hold-after-commit.
func ParseFault(s string) (Fault, error) {
	if d, ok := strings.CutPrefix(s, "latency="); ok {
		lat, err := time.ParseDuration(d)
		if err != nil || lat <= 0 {
			return Fault{}, fmt.Errorf("proxy: bad latency %q in fault %q (want a positive duration such as 50ms)", d, s)
		}
		return Fault{Mode: Delay, Latency: lat}, nil
	}
	switch m := Mode(s); m {
	case Pass, Reset, Blackhole, Refuse, CutAfterCommit, HoldAfterCommit:
		return Fault{Mode: m}, nil
	}
	return Fault{}, fmt.Errorf("proxy: unknown fault %q (want none, latency=DURATION, reset, blackhole, refuse, cut-after-commit or hold-after-commit)", s)
}

// String returns f in ParseFault's syntax.
func (f Fault) String() string {
	switch f.Mode {
	case Delay:
		return "latency=" + f.Latency.String()
	case Inherit:
		return "inherit"
	}
	return string(f.Mode)
}

// Config configures a [Proxy].
type Config struct {
	// Listen is the address to listen on; "" means "127.0.0.1:0" (loopback,
	// a free port). Anything else is used as given.
	Listen string
	// Target is the server's address, host:port. Required.
	Target string
	// Protocol is the wire protocol parsed to recognise COMMIT; "" means
	// ProtocolAuto.
	Protocol Protocol
	// Fault is the initial proxy-wide fault; the zero value means Pass.
	Fault Fault
	// CutWait bounds how long CutAfterCommit waits for the server's reply
	// to a COMMIT before it cuts anyway; 0 means 5 s.
	CutWait time.Duration
	// DialTimeout bounds each connection to Target; 0 means 5 s.
	DialTimeout time.Duration
	// Logger gets one Info record per injected fault, and one Warn record
	// per connection that turns out to be encrypted (see [Counts].TLS);
	// nil discards them.
	Logger *slog.Logger
}

// Counts counts what a [Proxy] did.
type Counts struct {
	Connections    int `json:"connections"`      // connections accepted
	CommitsSeen    int `json:"commits_seen"`     // COMMITs recognised in client streams
	Latency        int `json:"latency"`          // chunks delayed
	Reset          int `json:"reset"`            // connections reset
	Blackhole      int `json:"blackhole"`        // connections held unanswered
	Refuse         int `json:"refuse"`           // new connections refused
	CutAfterCommit int `json:"cut_after_commit"` // connections cut after a COMMIT
	// HoldAfterCommit counts COMMIT replies held: each one is a COMMIT the
	// server has answered and the client has not heard.
	HoldAfterCommit int `json:"hold_after_commit"`
	// TLS counts connections that encrypted their traffic (TLS, or
	// PostgreSQL's GSS encryption). The proxy cannot read inside them: it
	// sees no COMMIT there, and cut-after-commit never fires. Connection
	// faults (latency, reset, blackhole, refuse) still work. A run that
	// relies on COMMITs being seen should fail when this is not 0.
	TLS int `json:"tls"`
}

// TLSAdvice says why an encrypted connection defeats the faults that read
// the protocol and how to turn encryption off. The proxy logs it once per
// encrypted connection; callers may print it too.
const TLSAdvice = "the proxy cannot see COMMITs inside TLS, so cut-after-commit never fires " +
	"(latency, reset, blackhole and refuse still work); turn TLS off between the client and the proxy: " +
	"sslmode=disable in a PostgreSQL DSN (pgx and libpq default to sslmode=prefer, which uses TLS when the server offers it), " +
	"tls=false in a go-sql-driver/mysql DSN, --ssl-mode=DISABLED (mysql) or --skip-ssl (mariadb) on the command line"

// Faults returns the number of injected faults of all kinds.
func (c Counts) Faults() int {
	return c.Latency + c.Reset + c.Blackhole + c.Refuse + c.CutAfterCommit + c.HoldAfterCommit
}

// ConnInfo describes one proxied connection.
type ConnInfo struct {
	ID     uint64 // 1 for the first connection accepted, then 2, 3...
	Client string // the client's address
	Fault  Fault  // its own fault; Inherit if it follows the proxy's
}

// A Proxy is a TCP proxy in front of a real PostgreSQL or MySQL server that
// injects network faults at run time, for every connection or for one. It is
// safe for concurrent use by multiple goroutines.
type Proxy struct {
	cfg    Config
	ln     net.Listener
	logger *slog.Logger
	done   chan struct{}
	wg     sync.WaitGroup

	mu      sync.Mutex
	fault   Fault
	changed chan struct{} // closed and replaced on every fault change
	conns   map[uint64]*proxyConn
	nextID  uint64
	counts  Counts
	closed  bool
}

// New starts a proxy listening on cfg.Listen and forwarding to
// cfg.Target. Stop it with Close.
func New(cfg Config) (*Proxy, error) {
	if cfg.Target == "" {
		return nil, errors.New("proxy: Config.Target is required")
	}
	if _, _, err := net.SplitHostPort(cfg.Target); err != nil {
		return nil, fmt.Errorf("proxy: Config.Target %q: %w", cfg.Target, err)
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.Protocol == "" {
		cfg.Protocol = ProtocolAuto
	}
	if _, err := ParseProtocol(string(cfg.Protocol)); err != nil {
		return nil, fmt.Errorf("proxy: Config.Protocol: %w", err)
	}
	if cfg.Fault.Mode == Inherit {
		cfg.Fault.Mode = Pass
	}
	if err := cfg.Fault.validate(); err != nil {
		return nil, fmt.Errorf("proxy: Config.Fault: %w", err)
	}
	if cfg.CutWait <= 0 {
		cfg.CutWait = 5 * time.Second
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("proxy: Config.Listen: %w", err)
	}
	p := &Proxy{
		cfg: cfg, ln: ln, logger: logger, done: make(chan struct{}),
		fault: cfg.Fault, changed: make(chan struct{}), conns: map[uint64]*proxyConn{},
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (f Fault) validate() error {
	switch f.Mode {
	case Inherit, Pass, Reset, Blackhole, Refuse, CutAfterCommit, HoldAfterCommit:
		return nil
	case Delay:
		if f.Latency <= 0 {
			return errors.New("latency needs a positive Latency")
		}
		return nil
	}
	return fmt.Errorf("unknown mode %q", f.Mode)
}

// Addr returns the address the proxy listens on, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Fault returns the proxy-wide fault.
func (p *Proxy) Fault() Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fault
}

// SetFault sets the fault for every connection, established and new, that
// has none of its own. Reset takes effect on established connections at once.
func (p *Proxy) SetFault(f Fault) error {
	if f.Mode == Inherit {
		f.Mode = Pass
	}
	if err := f.validate(); err != nil {
		return fmt.Errorf("proxy: Proxy.SetFault: %w", err)
	}
	p.mu.Lock()
	p.fault = f
	p.changedLocked()
	var reset []*proxyConn
	for _, c := range p.conns {
		if c.fault.Mode == Inherit && f.Mode == Reset {
			reset = append(reset, c)
		}
	}
	p.mu.Unlock()
	p.logger.Info("sqlretry/faults/proxy: fault set", "fault", f.String())
	for _, c := range reset {
		c.reset("fault set")
	}
	return nil
}

// SetConnFault sets one connection's own fault; Fault{} (Inherit) makes it
// follow the proxy-wide fault again. Refuse only concerns new connections
// and is not accepted here.
func (p *Proxy) SetConnFault(id uint64, f Fault) error {
	if err := f.validate(); err != nil {
		return fmt.Errorf("proxy: Proxy.SetConnFault: %w", err)
	}
	if f.Mode == Refuse {
		return errors.New("proxy: Proxy.SetConnFault: refuse applies to new connections only")
	}
	p.mu.Lock()
	c, ok := p.conns[id]
	if ok {
		c.fault = f
		p.changedLocked()
	}
	eff := p.effectiveLocked(c)
	p.mu.Unlock()
	if !ok {
		return fmt.Errorf("proxy: Proxy.SetConnFault: no open connection %d", id)
	}
	if eff.Mode == Reset {
		c.reset("connection fault set")
	}
	return nil
}

// Conns lists the open connections, oldest first.
func (p *Proxy) Conns() []ConnInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]ConnInfo, 0, len(p.conns))
	for _, c := range p.conns {
		out = append(out, ConnInfo{ID: c.id, Client: c.client.RemoteAddr().String(), Fault: c.fault})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Counts returns a snapshot of the proxy's counters.
func (p *Proxy) Counts() Counts {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts
}

// Close stops listening, closes every connection and waits for all of the
// proxy's goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	conns := make([]*proxyConn, 0, len(p.conns))
	for _, c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	for _, c := range conns {
		c.close()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) changedLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// effectiveLocked returns c's fault, or the proxy's if c has none (or c is
// nil, for a connection not yet registered).
func (p *Proxy) effectiveLocked(c *proxyConn) Fault {
	if c != nil && c.fault.Mode != Inherit {
		return c.fault
	}
	return p.fault
}

// effective returns c's fault and a channel closed at the next change.
func (p *Proxy) effective(c *proxyConn) (Fault, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.effectiveLocked(c), p.changed
}

func (p *Proxy) count(f func(*Counts)) {
	p.mu.Lock()
	f(&p.counts)
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		cc, err := p.ln.Accept()
		if err != nil {
			select {
			case <-p.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			p.logger.Error("sqlretry/faults/proxy: accept failed", "err", err)
			return
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			cc.Close()
			return
		}
		p.nextID++
		c := &proxyConn{p: p, id: p.nextID, client: cc, closed: make(chan struct{})}
		p.conns[c.id] = c
		p.counts.Connections++
		p.wg.Add(1)
		p.mu.Unlock()
		go c.run()
	}
}

// proxyConn is one client connection and its server connection.
type proxyConn struct {
	p      *Proxy
	id     uint64
	client net.Conn
	fault  Fault // guarded by p.mu

	mu     sync.Mutex
	server net.Conn
	armed  bool // a COMMIT went to the server: cut when its reply begins
	timer  *time.Timer

	// holdNext: a COMMIT went to the server under HoldAfterCommit: hold
	// the next data from the server.
	holdNext atomic.Bool

	ended atomic.Bool // a reset or a cut ended it: inject at most one
	// awaitAnswer: the client asked PostgreSQL for encryption; the
	// server's next byte says whether it follows.
	awaitAnswer atomic.Bool
	encrypted   atomic.Bool // counted and warned about: at most once
	closeOnce   sync.Once
	closed      chan struct{}
}

func (c *proxyConn) log(msg string, args ...any) {
	c.p.logger.Info(msg, append([]any{"conn", c.id, "client", c.client.RemoteAddr().String()}, args...)...)
}

func (c *proxyConn) run() {
	defer c.p.wg.Done()
	defer func() {
		c.close()
		c.p.mu.Lock()
		delete(c.p.conns, c.id)
		c.p.mu.Unlock()
	}()
	// The fault a new connection meets.
	if !c.gate(true) {
		return
	}
	d := net.Dialer{Timeout: c.p.cfg.DialTimeout}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-c.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	sc, err := d.DialContext(ctx, "tcp", c.p.cfg.Target)
	cancel()
	if err != nil {
		c.p.logger.Warn("sqlretry/faults/proxy: cannot reach its target", "conn", c.id, "target", c.p.cfg.Target, "err", err)
		resetClose(c.client)
		return
	}
	c.mu.Lock()
	c.server = sc
	c.mu.Unlock()
	select {
	case <-c.closed: // closed while dialing
		sc.Close()
		return
	default:
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); c.upstream(sc) }()
	go func() { defer wg.Done(); c.downstream(sc) }()
	wg.Wait()
}

// gate applies the connection's fault before a chunk is forwarded (or, with
// isNew, before the connection is dialed). It reports whether to go on.
func (c *proxyConn) gate(isNew bool) bool {
	heldCounted := false
	for i := 0; ; i++ {
		f, changed := c.p.effective(c)
		switch f.Mode {
		case Refuse:
			if !isNew {
				return true
			}
			c.p.count(func(n *Counts) { n.Refuse++ })
			c.log("sqlretry/faults/proxy: injected fault", "fault", "refuse")
			resetClose(c.client)
			return false
		case Reset:
			c.reset("new connection")
			return false
		case Delay:
			if isNew {
				return true
			}
			c.p.count(func(n *Counts) { n.Latency++ })
			c.log("sqlretry/faults/proxy: injected fault", "fault", "latency", "latency", f.Latency)
			t := time.NewTimer(f.Latency)
			defer t.Stop()
			select {
			case <-t.C:
				return true
			case <-c.closed:
				return false
			}
		case Blackhole:
			if !heldCounted {
				heldCounted = true
				c.p.count(func(n *Counts) { n.Blackhole++ })
				c.log("sqlretry/faults/proxy: injected fault", "fault", "blackhole")
			}
			select {
			case <-changed:
				continue
			case <-c.closed:
				return false
			}
		}
		return true
	}
}

// upstream forwards client to server, watching for COMMIT.
func (c *proxyConn) upstream(sc net.Conn) {
	defer c.close()
	parser := newParser(c.p.cfg.Protocol)
	buf := make([]byte, 32<<10)
	for {
		n, err := c.client.Read(buf)
		if n > 0 {
			seen := parser.feed(buf[:n])
			commits := seen.commits
			if seen.encrypted {
				c.markEncrypted("the client started TLS")
			}
			if seen.askedEncryption {
				// Before the write: the server answers at once.
				c.awaitAnswer.Store(true)
			}
			if commits > 0 {
				c.p.count(func(k *Counts) { k.CommitsSeen += commits })
			}
			if !c.gate(false) {
				return
			}
			if commits > 0 {
				switch f, _ := c.p.effective(c); f.Mode {
				case CutAfterCommit:
					c.arm() // before the write: the reply may be quick
				case HoldAfterCommit:
					c.holdNext.Store(true)
				}
			}
			if _, werr := sc.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// downstream forwards server to client, unless a cut is armed.
func (c *proxyConn) downstream(sc net.Conn) {
	defer c.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := sc.Read(buf)
		if n > 0 {
			// PostgreSQL answers an SSLRequest with 'S' and a
			// GSSENCRequest with 'G' when it accepts, 'N' when not.
			if c.awaitAnswer.Swap(false) && (buf[0] == 'S' || buf[0] == 'G') {
				c.markEncrypted("the server accepted the client's request for encryption")
			}
			c.mu.Lock()
			armed := c.armed
			c.mu.Unlock()
			if armed {
				c.cutNow("the server's reply arrived")
				return
			}
			if c.holdNext.Swap(false) && !c.hold() {
				return
			}
			if !c.gate(false) {
				return
			}
			if _, werr := c.client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// markEncrypted counts c as encrypted and warns, once. Passing the bytes on
// unchanged is deliberate: answering PostgreSQL's SSLRequest with 'N' in
// the server's stead would make a client with sslmode=prefer go on in
// plain text, but it would also decide, behind the user's back, that the
// proxy-to-server leg (perhaps across a network, perhaps carrying a
// password) goes unencrypted; a client with sslmode=require would fail
// with an error that blames the server; and MySQL offers no such answer
// (the proxy would have to rewrite the server's greeting). So the proxy
// only says so, loudly, and counts it for a caller to refuse the run.
func (c *proxyConn) markEncrypted(how string) {
	if !c.encrypted.CompareAndSwap(false, true) {
		return
	}
	c.p.count(func(n *Counts) { n.TLS++ })
	c.p.logger.Warn("sqlretry/faults/proxy: the connection uses TLS: "+TLSAdvice,
		"conn", c.id, "client", c.client.RemoteAddr().String(), "when", how)
}

// hold holds the server's reply to a COMMIT until the connection's fault
// is no longer HoldAfterCommit. It reports whether to go on forwarding.
func (c *proxyConn) hold() bool {
	counted := false
	for {
		f, changed := c.p.effective(c)
		if f.Mode != HoldAfterCommit {
			return true
		}
		if !counted {
			counted = true
			c.p.count(func(n *Counts) { n.HoldAfterCommit++ })
			c.log("sqlretry/faults/proxy: injected fault", "fault", "hold-after-commit")
		}
		select {
		case <-changed:
		case <-c.closed:
			return false
		}
	}
}

func (c *proxyConn) arm() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.armed {
		return
	}
	c.armed = true
	c.timer = time.AfterFunc(c.p.cfg.CutWait, func() { c.cutNow("no reply within CutWait") })
}

func (c *proxyConn) cutNow(why string) {
	if c.isClosed() || !c.ended.CompareAndSwap(false, true) {
		return // already closed for another reason: nothing injected
	}
	c.p.count(func(n *Counts) { n.CutAfterCommit++ })
	c.log("sqlretry/faults/proxy: injected fault", "fault", "cut-after-commit", "when", why)
	resetClose(c.client)
	c.close()
}

// reset resets the client connection and closes the server one, counting
// the fault once.
func (c *proxyConn) reset(why string) {
	if c.isClosed() || !c.ended.CompareAndSwap(false, true) {
		return
	}
	c.p.count(func(n *Counts) { n.Reset++ })
	c.log("sqlretry/faults/proxy: injected fault", "fault", "reset", "when", why)
	resetClose(c.client)
	c.close()
}

func (c *proxyConn) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

func (c *proxyConn) close() {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.client.Close()
		c.mu.Lock()
		if c.server != nil {
			c.server.Close()
		}
		if c.timer != nil {
			c.timer.Stop()
		}
		c.mu.Unlock()
	})
}

// resetClose closes c with SO_LINGER 0, so the peer gets a TCP RST
// (ECONNRESET) rather than an orderly end of stream.
func resetClose(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}
