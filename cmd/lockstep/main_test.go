package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// result is what one lockstep invocation did.
type result struct {
	code   int
	stdout string
	stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\n-- stdout --\n%s-- stderr --\n%s", r.code, r.stdout, r.stderr)
}

// cli runs lockstep in process on the database db with the clock at now.
func cli(db string, now time.Time, args ...string) result {
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"--db", db}, args...), &out, &errb, func() time.Time { return now })
	return result{code, out.String(), errb.String()}
}

// goldenData fills the templates of golden files: the times the saver
// stamped (with its own clock) on the threads' last updates.
type goldenData struct {
	db      string // the --db path, which varies (t.TempDir)
	now     time.Time
	updated map[string]time.Time
}

func (d goldenData) funcs() template.FuncMap {
	return template.FuncMap{
		"age":     func(thread string) string { return formatAge(d.now.Sub(d.updated[thread])) + " ago" },
		"updated": func(thread string) string { return d.updated[thread].UTC().Format(time.RFC3339Nano) },
		"db":      func() string { return d.db },
	}
}

// templated turns got into a golden template: the saver's times (which
// tests cannot pin) become template actions.
func (d goldenData) templated(got string) string {
	if d.db != "" {
		got = strings.ReplaceAll(got, d.db, "{{db}}")
	}
	threads := make([]string, 0, len(d.updated))
	for th := range d.updated {
		threads = append(threads, th)
	}
	slices.Sort(threads)
	for _, th := range threads {
		got = strings.ReplaceAll(got, d.updated[th].UTC().Format(time.RFC3339Nano), fmt.Sprintf("{{updated %q}}", th))
	}
	lines := strings.Split(got, "\n")
	for i, l := range lines {
		for _, th := range threads {
			age := formatAge(d.now.Sub(d.updated[th])) + " ago"
			if strings.HasPrefix(l, th+" ") && strings.HasSuffix(l, age) {
				lines[i] = strings.TrimSuffix(l, age) + fmt.Sprintf("{{age %q}}", th)
			}
		}
	}
	return strings.Join(lines, "\n")
}

// checkGolden compares got with testdata/name.golden (a text/template
// filled from d), or rewrites the file with -update.
func checkGolden(t *testing.T, name string, got result, d goldenData) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(d.templated(got.String())), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	tmpl, err := template.New(name).Funcs(d.funcs()).Parse(string(b))
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	if err := tmpl.Execute(&want, nil); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want.String(), got.String()); diff != "" {
		t.Errorf("lockstep output differs from %s (-want +got):\n%s", path, diff)
	}
}

// checkOneJSON checks that s is exactly one JSON document.
func checkOneJSON(t *testing.T, s string) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, s)
	}
	if err := dec.Decode(&v); !errors.Is(err, io.EOF) {
		t.Fatalf("stdout holds more than one JSON document (%v)\n%s", err, s)
	}
}

// threadUpdates returns when the saver last updated each thread.
func threadUpdates(t *testing.T, path string) map[string]time.Time {
	t.Helper()
	s, err := sqlite.Open(path, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	infos, err := s.Threads(context.Background(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]time.Time{}
	for _, ti := range infos {
		out[ti.Thread] = ti.UpdatedAt
	}
	return out
}

// dump returns every row of every table of the database at path, as
// text, in a stable order: the whole content, to show that a command
// changed nothing.
func dump(t *testing.T, path string) map[string][]string {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("dump: %v", err)
	}
	s, err := sqlite.Open(path, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	db := s.DB()
	rows, err := db.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, n)
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, tb := range tables {
		rows, err := db.QueryContext(ctx, `SELECT * FROM "`+tb+`"`)
		if err != nil {
			t.Fatal(err)
		}
		cols, err := rows.Columns()
		if err != nil {
			t.Fatal(err)
		}
		lines := []string{}
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			for i, v := range vals {
				if raw, ok := v.([]byte); ok {
					v = string(raw)
				}
				fmt.Fprintf(&b, "%s=%q ", cols[i], fmt.Sprint(v))
			}
			lines = append(lines, b.String())
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
		slices.Sort(lines)
		out[tb] = lines
	}
	return out
}

// checkDumpFull checks that the dump holds rows in several tables (the
// saver's checkpoints, blobs, writes...), so that comparing dumps means
// something. Table names are the saver's business and are not named here.
func checkDumpFull(t *testing.T, d map[string][]string) {
	t.Helper()
	full := 0
	for _, rows := range d {
		if len(rows) > 0 {
			full++
		}
	}
	if full < 3 {
		t.Fatalf("the dump has rows in %d tables, want at least 3: %v", full, d)
	}
}
