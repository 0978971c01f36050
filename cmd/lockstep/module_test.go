package main

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
)

// triageProgram is an application the CLI was never compiled with, in a
// module of its own: a graph with a conditional edge (declared
// destinations), a Send fan-out, a join, a node whose name needs escaping
// and a node that waits for a human. It writes a thread that waits in
// "human review" to the database named by its first argument, and prints
// the graph's Runnable.Mermaid.
const triageProgram = `package main

import (
	"context"
	"fmt"
	"os"

	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
)

type Ticket struct {
	Text   string
	Checks []string ` + "`lockstep:\"append\"`" + `
	Answer string
}

func note(s string) graph.NodeFunc[Ticket] {
	return func(ctx context.Context, t Ticket) (graph.Update[Ticket], error) {
		return graph.Set(Ticket{Checks: []string{s}}, "Checks"), nil
	}
}

func main() {
	s, err := sqlite.Open(os.Args[1], sqlite.Config{})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	r, err := graph.New[Ticket]().
		AddNode("intake", note("intake")).
		AddNode("check", note("check")).
		AddNode("classify", note("classify")).
		AddNode("human review", func(ctx context.Context, t Ticket) (graph.Update[Ticket], error) {
			a, err := interrupt.Ask[string](ctx, "is this a refund? "+t.Text)
			if err != nil {
				return graph.Update[Ticket]{}, err
			}
			return graph.Set(Ticket{Answer: a}, "Answer"), nil
		}).
		AddNode("archive", note("archive")).
		AddEdge(graph.START, "intake").
		AddSendEdges("intake", func(ctx context.Context, t Ticket) ([]graph.Send[Ticket], error) {
			return []graph.Send[Ticket]{{Node: "check"}, {Node: "check"}}, nil
		}, "check").
		AddEdge("intake", "classify").
		AddJoin([]string{"check", "classify"}, "human review").
		AddConditionalEdges("human review", func(ctx context.Context, t Ticket) ([]string, error) {
			return []string{"archive"}, nil
		}, "archive", graph.END).
		Compile(graph.WithSaver(s), graph.WithName("triage"))
	if err != nil {
		panic(err)
	}
	res, err := r.Invoke(context.Background(), "ticket-42", graph.Set(Ticket{Text: "my parcel never came"}, "Text"))
	if err != nil {
		panic(err)
	}
	if res.Status != graph.StatusWaiting {
		panic(fmt.Sprintf("status %s, want waiting", res.Status))
	}
	fmt.Print(r.Mermaid())
}
`

// tempModule writes a module holding program as its main package, which
// requires this repository through a replace directive and the
// repository's own requirements (so that it builds offline, from the
// module cache), and returns its directory.
func tempModule(t *testing.T, program string) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	gosum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	mod := regexp.MustCompile(`(?m)^module .*$`).ReplaceAllString(string(gomod), "module example.com/triage")
	mod += "\nrequire github.com/lockstepgo/lockstep v0.0.0-00010101000000-000000000000\n\nreplace github.com/lockstepgo/lockstep => " + root + "\n"
	dir := t.TempDir()
	for name, data := range map[string]string{"go.mod": mod, "go.sum": string(gosum), "main.go": program} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// goCommand runs the go command in dir, offline and outside any
// workspace, and returns its standard output.
func goCommand(t *testing.T, dir string, args ...string) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed: %v", err)
	}
	cmd := exec.Command(gobin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOPROXY=off")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// TestGraphOfAnUnknownApplication: lockstep graph THREAD draws, from the
// database alone, the graph of an application it was never compiled
// with (built and run in a temporary module): exactly what that
// application's Runnable.Mermaid draws, with the node the thread waits in
// marked; state names the graph.
func TestGraphOfAnUnknownApplication(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module: not in -short")
	}
	dir := tempModule(t, triageProgram)
	db := filepath.Join(t.TempDir(), "triage.db")
	want := goCommand(t, dir, "run", ".", db)
	if !strings.Contains(want, "human_20_review(human review)") {
		t.Fatalf("the application printed no graph:\n%s", want)
	}

	got := cli(db, time.Now(), "graph", "ticket-42")
	if got.code != exitOK || got.stderr != "" {
		t.Fatalf("lockstep graph: exit %d: %s", got.code, got.stderr)
	}
	marked := "\thuman_20_review(human review):::waiting\n"
	if !strings.Contains(got.stdout, marked) {
		t.Errorf("the waiting node is not marked (want %q):\n%s", marked, got.stdout)
	}
	unmarked := strings.Replace(got.stdout, marked, "\thuman_20_review(human review)\n", 1)
	unmarked = strings.Replace(unmarked, "\tclassDef waiting fill:#fde68a,stroke:#b45309,stroke-width:2px\n", "", 1)
	if d := cmp.Diff(want, unmarked); d != "" {
		t.Errorf("lockstep graph, marks removed, differs from the application's Runnable.Mermaid (-app +cli):\n%s", d)
	}
	checkGolden(t, "graph-unknown-application", got, goldenData{db: db})

	js := cli(db, time.Now(), "graph", "ticket-42", "--json")
	var out graphJSON
	if err := json.Unmarshal([]byte(js.stdout), &out); err != nil || js.code != exitOK {
		t.Fatalf("graph --json: exit %d, %v:\n%s%s", js.code, err, js.stdout, js.stderr)
	}
	if out.Graph != "triage" || out.Mermaid != got.stdout || !cmp.Equal(out.Waiting, []string{"human review"}) || out.Changed {
		t.Errorf("graph --json = %+v", out)
	}
	st := cli(db, time.Now(), "state", "ticket-42")
	if st.code != exitOK || !strings.Contains(st.stdout, `graph       "triage" `+out.Fingerprint+" (the newest version stored)") {
		t.Errorf("state: exit %d:\n%s%s", st.code, st.stdout, st.stderr)
	}
}

// TestNoExampleInTheBinary: the lockstep command imports no example
// package (go list -deps).
func TestNoExampleInTheBinary(t *testing.T) {
	deps := goCommand(t, ".", "list", "-deps", ".")
	if !strings.Contains(deps, "github.com/lockstepgo/lockstep/graph\n") {
		t.Fatalf("go list -deps printed no graph package:\n%s", deps)
	}
	for _, p := range strings.Fields(deps) {
		if strings.Contains(p, "/examples/") || strings.HasSuffix(p, "/examples") {
			t.Errorf("cmd/lockstep depends on the example package %s", p)
		}
	}
}

// schema4 turns the database at path into one the lockstep before
// topologies (schema 4) wrote: no topologies table. Its checkpoints keep the fingerprints
// they name; a thread "legacy" whose checkpoint names none (as every
// checkpoint an older lockstep wrote) is added.
func schema4(t *testing.T, path string) {
	t.Helper()
	d, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`DROP TABLE topologies`, `PRAGMA user_version = 4`} {
		if _, err := d.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	d.Close()
	s, err := sqlite.OpenExisting(path, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	id := checkpoint.NewIDGenerator(t0, nil).Next("")
	if err := s.Put(t.Context(), checkpoint.PutRequest{Thread: "legacy", Lease: checkpoint.Lease{Owner: "old-run", TTL: time.Minute}, Release: true,
		Checkpoint: checkpoint.Checkpoint{ID: id, CreatedAt: t0(), Metadata: checkpoint.Metadata{Source: checkpoint.SourceInput, Step: -1},
			Versions: map[string]string{"Note": id}, Channels: map[string][]checkpoint.Blob{"Note": {{Version: id, Data: json.RawMessage(`"written before topologies"`)}}}}}); err != nil {
		t.Fatal(err)
	}
}

// TestOlderDatabase: a database the lockstep before topologies wrote
// (schema 4, no topologies table) reads as before and is not changed: state says no
// topology is stored (or, for a checkpoint that names none, that it was
// not recorded), and graph refuses with not found and says why.
func TestOlderDatabase(t *testing.T) {
	f := buildFixture(t)
	db := f.copyDB(t)
	schema4(t, db)
	before, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string // a line of it
		stderr string
	}{
		{args: []string{"threads"}, stdout: "legacy "},
		{args: []string{"state", threadRefund}, stdout: "graph       9e75ebcacc00d361bf20ca71bac629e3 (this database stores no graph topologies: an older lockstep wrote it)"},
		{args: []string{"state", "legacy"}, stdout: "graph       not recorded (the checkpoint was written before lockstep recorded graphs)"},
		{args: []string{"graph", threadRefund}, code: exitNotFound, stderr: "stores no graph topologies (an older lockstep wrote it): open the database once with the program that uses it"},
		{args: []string{"graph", "legacy"}, code: exitNotFound, stderr: "names no graph: it was written before lockstep recorded the graph of each checkpoint"},
	} {
		got := cli(db, cliNow(), tc.args...)
		if got.code != tc.code || !strings.Contains(got.stdout, tc.stdout) || !strings.Contains(got.stderr, tc.stderr) {
			t.Errorf("%v: exit %d, want %d, with %q and %q in:\n%s%s", tc.args, got.code, tc.code, tc.stdout, tc.stderr, got.stdout, got.stderr)
		}
	}
	got := cli(db, cliNow(), "--json", "graph", "legacy")
	if !strings.Contains(got.stdout, `"kind": "not_found"`) {
		t.Errorf("graph --json of a thread without a graph:\n%s", got.stdout)
	}
	if after, err := os.ReadFile(db); err != nil || !bytes.Equal(before, after) {
		t.Errorf("reading the schema-4 database changed it (%v)", err)
	}
	d, err := sql.Open("sqlite3", "file:"+db+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var v int
	if err := d.QueryRow("PRAGMA user_version").Scan(&v); err != nil || v != 4 {
		t.Errorf("user_version = %d, %v; want 4", v, err)
	}
}
