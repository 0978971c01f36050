package sqlite

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
)

// rawEqual compares stored JSON byte for byte (cmp would walk it byte by
// byte through reflection).
var rawEqual = cmp.Comparer(func(a, b json.RawMessage) bool { return bytes.Equal(a, b) })

// allTuples returns a fresh saver's Get of every checkpoint of thread
// (one that never read it: no head cache), with nothing held, after
// checking that it is what another fresh saver's List says.
func allTuples(t *testing.T, open func() *Saver, thread string) []*checkpoint.Tuple {
	t.Helper()
	s := open()
	defer closeChecked(t, s)
	list, err := s.List(t.Context(), thread, checkpoint.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cold := open()
	defer closeChecked(t, cold)
	out := make([]*checkpoint.Tuple, 0, len(list))
	for _, tp := range list {
		got, err := cold.Get(t.Context(), tp.Ref(), checkpoint.GetOptions{})
		if err != nil {
			t.Fatalf("Get %s: %v", tp.Ref(), err)
		}
		if d := cmp.Diff(tp, got, rawEqual); d != "" {
			t.Fatalf("Get %s differs from List's (-list +get):\n%s", tp.Ref(), d)
		}
		out = append(out, got)
	}
	return out
}

// linksMatch checks every checkpoints row of the file: links is what its
// channels say (linksOf), or NULL for the rows listed in pre7.
func linksMatch(t *testing.T, db *sql.DB, pre7 map[string]bool) (rows, null int) {
	t.Helper()
	q, err := db.QueryContext(t.Context(), `SELECT thread_id, links, `+cpColumns+` FROM checkpoints`)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for q.Next() {
		var thread string
		var links sql.NullString
		r, err := scanRow(q, &thread, &links)
		if err != nil {
			t.Fatal(err)
		}
		rows++
		if !links.Valid {
			null++
			if !pre7[r.id] {
				t.Errorf("row %s: links NULL, written at schema %d", r.id, linksSchema)
			}
			continue
		}
		chans, err := r.blobs(thread)
		if err != nil {
			t.Fatal(err)
		}
		if want := linksOf(chans, func(string) bool { return true }); links.String != want {
			t.Errorf("row %s (pruned %v): links %s, its channels say %s", r.id, r.pruned, links.String, want)
		}
	}
	if err := q.Err(); err != nil {
		t.Fatal(err)
	}
	return rows, null
}

// TestLinksMigration: a schema-6 file (written through OpenExisting, which
// leaves it at 6) is migrated by Open: its rows keep links NULL and read
// exactly as before, checkpoint by checkpoint, by a saver that never saw
// the thread; the rows written after the migration have links, and the
// chains that run through rows of both kinds read whole.
func TestLinksMigration(t *testing.T) {
	path := schemaFile(t, 6)
	old, err := OpenExisting(path, Config{Synchronous: SyncNormal})
	if err != nil {
		t.Fatal(err)
	}
	r, err := coldGraph(old, 120)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Invoke(t.Context(), "long", graph.Update[coldState]{}); err != nil {
		t.Fatal(err)
	}
	closeChecked(t, old)
	existing := func() *Saver {
		s, err := OpenExisting(path, Config{Synchronous: SyncNormal})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := allTuples(t, existing, "long")
	pre7 := map[string]bool{}
	for _, tp := range before {
		pre7[tp.Checkpoint.ID] = true
	}

	s := openAt(t, path, Config{Synchronous: SyncNormal})
	if v := userVersion(t, s.DB()); v != schemaVersion {
		t.Fatalf("user_version after Open = %d, want %d", v, schemaVersion)
	}
	if rows, null := linksMatch(t, s.DB(), pre7); null != rows {
		t.Errorf("after the migration %d of %d rows have links; want none (the migration only adds the column)", rows-null, rows)
	}
	integrityOK(t, s.DB())
	closeChecked(t, s)
	current := func() *Saver { return openAt(t, path, Config{Synchronous: SyncNormal}) }
	after := allTuples(t, current, "long")
	if d := cmp.Diff(before, after, rawEqual); d != "" {
		t.Fatalf("the schema-6 rows read differently after the migration (-before +after):\n%s", d)
	}

	// Appends after the migration extend chains that start in schema-6 rows.
	s = current()
	r, err = coldGraph(s, 160)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Invoke(t.Context(), "long", graph.Update[coldState]{})
	if err != nil {
		t.Fatal(err)
	}
	if rows, null := linksMatch(t, s.DB(), pre7); null != len(pre7) || rows <= null {
		t.Errorf("after more appends: %d rows, %d with links NULL; want the %d schema-6 rows NULL and links on the rest", rows, null, len(pre7))
	}
	closeChecked(t, s)
	s = current()
	defer closeChecked(t, s)
	cold, err := coldGraph(s, 160)
	if err != nil {
		t.Fatal(err)
	}
	st, err := cold.GetState(t.Context(), "long")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(res.Values, st.Values, rawEqual); d != "" {
		t.Errorf("cold GetState across schema-6 and schema-7 rows (-run +read):\n%s", d)
	}
	again := allTuples(t, current, "long")
	if d := cmp.Diff(after, again[len(again)-len(after):], rawEqual); d != "" {
		t.Errorf("the schema-6 checkpoints read differently after later appends (-before +after):\n%s", d)
	}
}

// TestLinksDamaged: links only chooses which rows a walk reads. Links
// that name another row, that are cut short, or that are not JSON make a
// cold read fall back to walking the channels, and every checkpoint still
// reads exactly as it was written; a Prune keeps links in step with the
// channels it strips.
func TestLinksDamaged(t *testing.T) {
	path, want, chain := coldThread(t, 300)
	open := func(p string) func() *Saver {
		return func() *Saver { return openAt(t, p, Config{Synchronous: SyncNormal}) }
	}
	s := open(path)()
	linksMatch(t, s.DB(), nil)
	closeChecked(t, s)
	wantAll := allTuples(t, open(path), "long")
	mid := chain[len(chain)/2].Version
	for _, tc := range []struct {
		name string
		sql  string // ?1 = a row in the middle of the head's chain
	}{
		{"another row named", `UPDATE checkpoints SET links = json_object('Msgs', ?2) WHERE thread_id = 'long' AND checkpoint_id = ?1`},
		{"a version that is no row", `UPDATE checkpoints SET links = '{"Msgs":"00000000-0000-7000-8000-000000000000"}' WHERE thread_id = 'long' AND checkpoint_id = ?1`},
		{"link cut", `UPDATE checkpoints SET links = '{}' WHERE thread_id = 'long' AND checkpoint_id = ?1`},
		{"not JSON", `UPDATE checkpoints SET links = '{"Msgs":' WHERE thread_id = 'long' AND checkpoint_id = ?1`},
		{"every row cut", `UPDATE checkpoints SET links = '{}' WHERE thread_id = 'long' AND ?1 <> ''`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "bad.db")
			copyFile(t, path, p)
			s := open(p)()
			if _, err := s.DB().ExecContext(t.Context(), tc.sql, mid, chain[len(chain)-1].Version); err != nil {
				t.Fatal(err)
			}
			closeChecked(t, s)
			if d := cmp.Diff(wantAll, allTuples(t, open(p), "long"), rawEqual); d != "" {
				t.Errorf("reads with damaged links (-want +got):\n%s", d)
			}
			s = open(p)()
			defer closeChecked(t, s)
			r, err := coldGraph(s, 300)
			if err != nil {
				t.Fatal(err)
			}
			st, err := r.GetState(t.Context(), "long")
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(want, st.Values, rawEqual); d != "" {
				t.Errorf("cold GetState (-run +read):\n%s", d)
			}
		})
	}
	t.Run("prune", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "pruned.db")
		copyFile(t, path, p)
		s := open(p)()
		defer closeChecked(t, s)
		if n, err := s.Prune(t.Context(), "long", "", 3); err != nil || n == 0 {
			t.Fatalf("Prune = %d, %v", n, err)
		}
		var pruned int
		if err := s.DB().QueryRow(`SELECT count(*) FROM checkpoints WHERE pruned = 1`).Scan(&pruned); err != nil || pruned == 0 {
			t.Fatalf("%d pruned rows (%v), want the chain's rows kept pruned", pruned, err)
		}
		linksMatch(t, s.DB(), nil)
		r, err := coldGraph(s, 300)
		if err != nil {
			t.Fatal(err)
		}
		st, err := r.GetState(t.Context(), "long")
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(want, st.Values, rawEqual); d != "" {
			t.Errorf("cold GetState after Prune (-run +read):\n%s", d)
		}
	})
}
