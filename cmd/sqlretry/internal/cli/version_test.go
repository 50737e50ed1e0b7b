package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestGoLinesDeclareALanguageVersion reads the go lines of the repository's
// go.mod files and go.work. A go line is a floor every module that requires
// ours inherits (go mod tidy raises a user's line to it), so it names the
// lowest release the code and its dependencies need (go 1.26.0: errors.AsType,
// and modernc.org/sqlite's own floor), never the patch release of whoever
// last ran go mod tidy; and the modules of one workspace agree.
func TestGoLinesDeclareALanguageVersion(t *testing.T) {
	root := filepath.Join("..", "..", "..", "..")
	files := []string{"go.mod", "go.work", filepath.Join("cmd", "sqlretry", "go.mod")}
	// bench/ and the integration modules beside the library (pgxretry/...).
	more, err := filepath.Glob(filepath.Join(root, "*", "go.mod"))
	if err != nil || len(more) == 0 {
		t.Fatalf("no go.mod one level below the root: %v", err)
	}
	for _, m := range more {
		rel, _ := filepath.Rel(root, m)
		files = append(files, rel)
	}
	goLine := regexp.MustCompile(`(?m)^go (\S+)\s*$`)
	versions := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		m := goLine.FindSubmatch(b)
		if m == nil {
			t.Errorf("%s has no go line", f)
			continue
		}
		v := string(m[1])
		versions[f] = v
		if parts := strings.Split(v, "."); len(parts) != 3 || parts[2] != "0" {
			t.Errorf("%s: go %s; want a release's first version (1.N.0), not a patch", f, v)
		}
	}
	for f, v := range versions {
		if v != versions["go.mod"] {
			t.Errorf("%s: go %s, but the library's go.mod says go %s", f, v, versions["go.mod"])
		}
	}
}
