package cli

import (
	"strings"
	"testing"
)

// TestChaosClusterBadFlags checks that cluster runs refuse bad
// combinations with exit 2 and a message that names the flag, before
// anything starts.
func TestChaosClusterBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--cluster", "galera", "--engine", "sqlite"}, "--cluster: --cluster runs on MariaDB Galera (--engine mysql), not sqlite"},
		{[]string{"--failover", "--engine", "mysql"}, "--failover: --failover runs on PostgreSQL (--engine postgres), not mysql"},
		{[]string{"--failover", "--dsn", "root@tcp(127.0.0.1:3306)/test"}, "--dsn: --failover needs a postgres DSN"},
		{[]string{"--cluster", "galera", "--dsn", "postgres://u@h:5432/db"}, "--dsn: --cluster needs a mysql DSN"},
		{[]string{"--cluster", "galera", "--failover"}, "choose one"},
		{[]string{"--cluster", "galera", "--compare", "naive"}, "--compare: a cluster run"},
		{[]string{"--cluster", "mongo"}, "--cluster: unknown cluster \"mongo\""},
		{[]string{"--galera-routing", "spread"}, "--galera-routing: only a --cluster galera run"},
		{[]string{"--failover", "--dsn", "postgres://u@h1:5432/db?target_session_attrs=read-write"}, "multi-host DSN"},
	} {
		code, out, errs := runChaosCLI(t, c.args...)
		if code != ExitBadInput || !strings.Contains(errs, c.want) || out != "" {
			t.Errorf("%q: exit %d, stderr %q, stdout %q; want exit %d and %q", c.args, code, errs, out, ExitBadInput, c.want)
		}
	}
}
