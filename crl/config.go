package crl

import (
	"fmt"

	"github.com/sqlretry/sqlretry"
)

func errorf(format string, a ...any) error {
	return fmt.Errorf("crl: "+format, a...)
}

// Config is a complete rule configuration, as the JDBC driver's connection
// properties give it. The zero value is valid: no statement rules, the
// built-in connection list, and the driver's connect defaults.
type Config struct {
	// Syntax says how the rules write error codes: Numbers (SQL Server,
	// MySQL; the zero value) or SQLState (PostgreSQL, CockroachDB).
	Syntax Syntax
	// Exec is the retryExec value; "" for none.
	Exec string
	// Conn is the retryConn value; "" for none (the built-in list).
	Conn string
	// FilterMode says how query filters match. The zero value is FilterJDBC.
	FilterMode FilterMode
	// QueryTimeout, in seconds, if positive, bounds every statement wait:
	// a rule with a longer wait is rejected when the Config is validated
	// (R_InvalidRetryInterval), not when the rule fires. 0 (the zero value)
	// and negative values skip the check, like the driver's default -1. The
	// driver's literal queryTimeout=0, which rejects every positive wait, is
	// [Exec.CheckQueryTimeout](0).
	QueryTimeout int
	// ConnectRetryCount, ConnectRetryInterval and LoginTimeout are the
	// fields of [Connect]: 0 means the driver's default (1, 10 s, 30 s).
	ConnectRetryCount    int
	ConnectRetryInterval int
	LoginTimeout         int
}

// Connect returns the Config's connect properties.
func (c Config) Connect() Connect {
	return Connect{RetryCount: c.ConnectRetryCount, RetryInterval: c.ConnectRetryInterval, LoginTimeout: c.LoginTimeout}
}

// Validate parses the rules and checks every setting, including each
// statement wait against QueryTimeout. Rule errors are [*Error]s.
func (c Config) Validate() error {
	_, _, err := c.Schedules()
	return err
}

// Schedules validates c and returns its statement and connect schedules.
func (c Config) Schedules() (*ExecSchedule, *ConnSchedule, error) {
	switch {
	case c.Syntax > SQLState:
		return nil, nil, errorf("Config.Syntax %v is not a code syntax", c.Syntax)
	case c.FilterMode > FilterVerb:
		return nil, nil, errorf("Config.FilterMode %v is not a filter mode", c.FilterMode)
	}
	x, err := c.Syntax.ParseExec(c.Exec)
	if err != nil {
		return nil, nil, err
	}
	if c.QueryTimeout > 0 {
		if err := x.CheckQueryTimeout(c.QueryTimeout); err != nil {
			return nil, nil, err
		}
	}
	cn, err := c.Syntax.ParseConn(c.Conn)
	if err != nil {
		return nil, nil, err
	}
	cs, err := cn.Schedule(c.Connect())
	if err != nil {
		return nil, nil, err
	}
	return x.Schedule(c.FilterMode), cs, nil
}

// Apply validates c and sets p.Schedule and p.ConnectSchedule.
func (c Config) Apply(p *sqlretry.Config) error {
	xs, cs, err := c.Schedules()
	if err != nil {
		return err
	}
	p.Schedule, p.ConnectSchedule = xs, cs
	return nil
}
