package chaos

import (
	"strings"
	"testing"
)

// TestUncheckedNodeFailsAThrowawayRun: a Galera node that did not answer
// the final check was counted as agreeing, and the text report said it was
// "checked on" it, its reason dropped: a run whose killed node never came
// back passed. Now the report says NOT CHECKED with the reason, and on a
// throwaway cluster (every node should be back by the end) the run fails;
// on the user's cluster the node is reported, not counted.
func TestUncheckedNodeFailsAThrowawayRun(t *testing.T) {
	for _, throwaway := range []bool{true, false} {
		checks := []NodeCheck{
			{Node: "n1:3306", Rows: 40, Checksum: "1111"},
			{Node: "n2:3306", Unchecked: true, Err: "(dial tcp n2:3306: connect: connection refused)"},
			{Node: "n3:3306", Rows: 40, Checksum: "1111"},
		}
		markAgreement(checks)
		cr := &ClusterReport{Kind: ClusterGalera, Throwaway: throwaway, Nodes: []string{"n1:3306", "n2:3306", "n3:3306"}, Checks: checks}
		r := &RunReport{Cluster: cr}
		judgeChecks(cr, r)
		want := 0
		if throwaway {
			want = 1
		}
		if r.Invariants.Diverged != want || len(r.Problems) != 1 || !strings.Contains(r.Problems[0], "n2:3306 was not checked") {
			t.Errorf("throwaway %v: diverged %d, problems %q; want %d and one problem naming n2", throwaway, r.Invariants.Diverged, r.Problems, want)
		}
		var b strings.Builder
		r.writeCluster(&b)
		out := b.String()
		if strings.Contains(out, "checked on n2:3306") || !strings.Contains(out, "node n2:3306: NOT CHECKED (dial tcp") {
			t.Errorf("throwaway %v: the text report on a node that did not answer:\n%s\nwant it said NOT CHECKED, with its reason", throwaway, out)
		}
	}
}
