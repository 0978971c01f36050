package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/nodes/ledger"
)

// readmeSection returns the section of the repository's README.md that
// starts at the heading and ends at the next heading of its level.
func readmeSection(t *testing.T, heading string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("README.md has no heading %q", heading)
	}
	s = s[i+len(heading)+2:]
	if j := strings.Index(s, "\n## "); j >= 0 {
		s = s[:j]
	}
	return s
}

// tableRows returns the rows of the Markdown tables in s, keyed by the
// first backquoted name of their first cell, each the text of its other
// cells.
func tableRows(t *testing.T, s string) map[string]string {
	t.Helper()
	first := regexp.MustCompile("^`([^`]+)`")
	rows := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if !strings.HasPrefix(line, "| ") || len(cells) < 2 {
			continue
		}
		m := first.FindStringSubmatch(cells[0])
		if m == nil {
			continue // the header or its rule
		}
		if _, dup := rows[m[1]]; dup {
			t.Errorf("README.md lists %s twice", m[1])
		}
		rows[m[1]] = strings.Join(cells[1:], " | ")
	}
	return rows
}

// TestReadmeNamesEveryTable (issue 17): the README's list of the
// database's tables names every table and view that the checkpoint saver,
// the approval store and the ledger create in one file, and every column
// of each (backquoted, in its row), and nothing that does not exist. A
// table or column added to a schema fails here until the README says
// what it holds.
func TestReadmeNamesEveryTable(t *testing.T) {
	ctx := context.Background()
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "lockstep.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := approval.OpenSQLStore(ctx, s.DB(), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.NewSQL(ctx, s.DB(), ledger.Options{}); err != nil {
		t.Fatal(err)
	}
	rows, err := s.DB().QueryContext(ctx, `SELECT name FROM sqlite_schema WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, name)
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	documented := tableRows(t, readmeSection(t, "## The database"))
	for _, table := range tables {
		row, ok := documented[table]
		if !ok {
			t.Errorf("README.md (The database) does not list the table %s", table)
			continue
		}
		cols, err := s.DB().QueryContext(ctx, `SELECT name FROM pragma_table_info(?)`, table)
		if err != nil {
			t.Fatal(err)
		}
		for cols.Next() {
			var col string
			if err := cols.Scan(&col); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(row, "`"+col+"`") {
				t.Errorf("README.md's row of %s does not name its column `%s`", table, col)
			}
		}
		if err := cols.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for name := range documented {
		if !slices.Contains(tables, name) {
			t.Errorf("README.md (The database) lists %s, which no store creates", name)
		}
	}
}

// TestReadmeNamesEveryPackage (issue 17): the README's package table
// names every package of the module (go list ./...), a row ending in
// "/..." standing for the packages under it, and no package that does
// not exist.
func TestReadmeNamesEveryPackage(t *testing.T) {
	const module = "github.com/lockstepgo/lockstep"
	var pkgs []string
	for _, p := range strings.Fields(goCommand(t, filepath.Join("..", ".."), "list", "./...")) {
		if p != module { // the root package holds the module's tests and doc
			pkgs = append(pkgs, strings.TrimPrefix(p, module+"/"))
		}
	}
	documented := tableRows(t, readmeSection(t, "## Packages"))
	for _, p := range pkgs {
		if _, ok := documented[p]; ok {
			continue
		}
		covered := false
		for d := range documented {
			if prefix, ok := strings.CutSuffix(d, "/..."); ok && strings.HasPrefix(p, prefix+"/") {
				covered = true
			}
		}
		if !covered {
			t.Errorf("README.md (Packages) does not list the package %s", p)
		}
	}
	for d := range documented {
		prefix, tree := strings.CutSuffix(d, "/...")
		if !slices.ContainsFunc(pkgs, func(p string) bool { return p == d || tree && strings.HasPrefix(p, prefix+"/") }) {
			t.Errorf("README.md (Packages) lists %s, which is not a package of the module", d)
		}
	}
}
