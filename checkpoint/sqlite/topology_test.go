package sqlite

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// schemaFile returns a new file at schema version (1 ≤ version <
// schemaVersion) made by the migrations up to it, as the code of that
// version made its files.
func schemaFile(t *testing.T, version int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := sql.Open("sqlite3", "file:"+path+"?_journal_mode=WAL")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, m := range migrations {
		if m.version > version {
			break
		}
		if err := applyMigration(t.Context(), conn, m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.ExecContext(t.Context(), fmt.Sprintf("PRAGMA user_version = %d", version)); err != nil {
		t.Fatal(err)
	}
	return path
}

func userVersion(t *testing.T, db *sql.DB) int {
	t.Helper()
	var v int
	if err := db.QueryRow("PRAGMA user_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// leasedFile returns a file at schema version (2 or 3) whose thread t is
// leased until 2030, and a check that the migrated file keeps the lease.
func leasedFile(t *testing.T, version int) (string, func(*testing.T, *Saver)) {
	path := schemaFile(t, version)
	db, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	until := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := db.Exec(`INSERT INTO threads (thread_id, checkpoint_ns, lease_owner, lease_until, updated_at) VALUES ('t', '', 'old-run', ?, '2025-06-01T12:00:00.000000000Z')`,
		until.UnixNano()); err != nil {
		t.Fatal(err)
	}
	db.Close()
	return path, func(t *testing.T, s *Saver) {
		got, err := s.Lease(t.Context(), "t", "")
		if want := (checkpoint.LeaseInfo{Thread: "t", Owner: "old-run", Until: until}); err != nil || !cmp.Equal(got, want) {
			t.Errorf("Lease after the migration = %+v, %v; want %+v", got, err, want)
		}
	}
}

// testTopology is a stored topology for the tests of this package.
func testTopology(name, body string) checkpoint.Topology {
	data := []byte(`{"format":1,"name":"` + name + `","body":"` + body + `"}`)
	return checkpoint.Topology{Fingerprint: checkpoint.TopologyFingerprint(data), Name: name, Data: data}
}

// TestMigrateToTopologies: a file of every older schema opens with Open
// at the current one (with the topologies table), keeps what it
// held, stores and reads topologies, and opens again without another
// migration.
func TestMigrateToTopologies(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct {
		version int
		file    func(t *testing.T) (path string, check func(t *testing.T, s *Saver))
	}{
		{version: 1, file: func(t *testing.T) (string, func(*testing.T, *Saver)) {
			return copySchema1(t), func(t *testing.T, s *Saver) {
				if ids := listIDs(t, s, "linear"); len(ids) == 0 {
					t.Error("the schema-1 thread linear has no checkpoints after the migration")
				}
			}
		}},
		{version: 2, file: func(t *testing.T) (string, func(*testing.T, *Saver)) { return leasedFile(t, 2) }},
		{version: 3, file: func(t *testing.T) (string, func(*testing.T, *Saver)) { return leasedFile(t, 3) }},
		{version: 4, file: func(t *testing.T) (string, func(*testing.T, *Saver)) {
			path := schemaFile(t, 4)
			old, err := OpenExisting(path, Config{})
			if err != nil {
				t.Fatalf("OpenExisting of a schema-4 file: %v", err)
			}
			putLine(t, old, "t", 3)
			want, err := old.List(ctx, "t", checkpoint.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			closeChecked(t, old)
			return path, func(t *testing.T, s *Saver) {
				got, err := s.List(ctx, "t", checkpoint.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(want, got); d != "" {
					t.Errorf("thread t after the migration (-before +after):\n%s", d)
				}
			}
		}},
	} {
		t.Run("from schema "+string(rune('0'+tc.version)), func(t *testing.T) {
			path, check := tc.file(t)
			clock := newFakeClock()
			s := openAt(t, path, Config{Now: clock.Now})
			if v := userVersion(t, s.DB()); v != schemaVersion {
				t.Fatalf("user_version = %d after Open, want %d", v, schemaVersion)
			}
			check(t, s)
			a, b := testTopology("orders", "a"), testTopology("orders", "b")
			for _, tp := range []checkpoint.Topology{a, b} {
				if err := s.PutTopology(ctx, tp); err != nil {
					t.Fatalf("PutTopology after the migration: %v", err)
				}
			}
			if got, err := s.LatestTopology(ctx, "orders"); err != nil || got.Fingerprint != b.Fingerprint {
				t.Errorf("LatestTopology = %s, %v; want %s", got.Fingerprint, err, b.Fingerprint)
			}
			integrityOK(t, s.DB())
			closeChecked(t, s)
			again := openAt(t, path, Config{Now: clock.Now})
			if got, err := again.Topology(ctx, a.Fingerprint); err != nil || !bytes.Equal(got.Data, a.Data) {
				t.Errorf("Topology after opening again = %s, %v", got.Data, err)
			}
			check(t, again)
		})
	}
}

// TestOpenExistingSchema4: OpenExisting opens a schema-4 file (which
// predates the topologies table) as it is: its checkpoints read as
// before, Topology and LatestTopology find nothing (ErrNotFound),
// PutTopology is refused with a *SchemaError matching ErrSchemaTooOld,
// and the file is left at schema 4, byte for byte. A schema-3 file, whose
// rows this code does not read as they are, is refused.
func TestOpenExistingSchema4(t *testing.T) {
	ctx := t.Context()
	if s, err := OpenExisting(schemaFile(t, 3), Config{}); !errors.Is(err, ErrSchemaTooOld) {
		if err == nil {
			s.Close()
		}
		t.Errorf("OpenExisting of a schema-3 file: %v, want ErrSchemaTooOld", err)
	}
	path := schemaFile(t, 4)
	old, err := OpenExisting(path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	l := putLine(t, old, "t", 2)
	closeChecked(t, old)
	before := fileBytes(t, path)
	s, err := OpenExisting(path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if tp, err := s.Get(ctx, checkpoint.Ref{Thread: "t"}, checkpoint.GetOptions{}); err != nil || tp.Checkpoint.ID != l.head {
		t.Errorf("Get of the schema-4 thread: %v, %v", tp, err)
	}
	a := testTopology("orders", "a")
	if _, err := s.Topology(ctx, a.Fingerprint); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("Topology on schema 4: %v, want ErrNotFound", err)
	}
	if _, err := s.LatestTopology(ctx, "orders"); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("LatestTopology on schema 4: %v, want ErrNotFound", err)
	}
	err = s.PutTopology(ctx, a)
	var se *SchemaError
	if !errors.As(err, &se) || !errors.Is(err, ErrSchemaTooOld) || se.File != 4 {
		t.Errorf("PutTopology on schema 4: %v, want a *SchemaError of file version 4 matching ErrSchemaTooOld", err)
	}
	if v := userVersion(t, s.DB()); v != 4 {
		t.Errorf("user_version = %d, want 4", v)
	}
	closeChecked(t, s)
	if !bytes.Equal(before, fileBytes(t, path)) {
		t.Error("OpenExisting changed the schema-4 file")
	}
	if _, err := os.Stat(path + "-journal"); err == nil {
		t.Error("OpenExisting left a rollback journal")
	}
}

// TestTopologyCorrupt: a stored topology whose text no longer hashes to
// its fingerprint, or whose time does not parse, is a
// *checkpoint.CorruptError naming the fingerprint, from Topology and
// LatestTopology.
func TestTopologyCorrupt(t *testing.T) {
	ctx := t.Context()
	for name, tamper := range map[string]string{
		"data": `UPDATE topologies SET topology = replace(topology, '"a"', '"b"')`,
		"time": `UPDATE topologies SET created_at = 'yesterday'`,
	} {
		t.Run(name, func(t *testing.T) {
			s := openTemp(t, Config{})
			a := testTopology("orders", "a")
			if err := s.PutTopology(ctx, a); err != nil {
				t.Fatal(err)
			}
			if _, err := s.DB().Exec(tamper); err != nil {
				t.Fatal(err)
			}
			var ce *checkpoint.CorruptError
			if _, err := s.Topology(ctx, a.Fingerprint); !errors.As(err, &ce) || !strings.Contains(err.Error(), a.Fingerprint) {
				t.Errorf("Topology: %v, want a *checkpoint.CorruptError naming %s", err, a.Fingerprint)
			}
			if _, err := s.LatestTopology(ctx, "orders"); !errors.As(err, &ce) {
				t.Errorf("LatestTopology: %v, want a *checkpoint.CorruptError", err)
			}
		})
	}
}

// headsGraphsQuery is the package documentation's query of the graph each
// thread's head was saved under.
const headsGraphsQuery = `SELECT h.thread_id, h.checkpoint_id, t.name, t.fingerprint, t.stored_at
FROM thread_heads h
LEFT JOIN topologies t ON t.fingerprint = json_extract(h.metadata, '$."topology-fp"')
WHERE h.checkpoint_ns = ''
ORDER BY h.thread_id;`

// TestTopologiesWithTheShell: the documented query names the graph of
// each thread's head, through database/sql and the stock sqlite3 shell
// (when installed), and the topology reads as JSON text there.
func TestTopologiesWithTheShell(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "shell.db")
	s := openAt(t, path, Config{})
	a := testTopology("orders", "a")
	if err := s.PutTopology(ctx, a); err != nil {
		t.Fatal(err)
	}
	l := newLine("alpha")
	req := l.next()
	req.Checkpoint.Metadata.Topology = a.Fingerprint
	if err := s.Put(ctx, req); err != nil {
		t.Fatal(err)
	}
	putLine(t, s, "beta", 1)
	var thread, id string
	var name, fp sql.NullString
	var stored sql.NullString
	if err := s.DB().QueryRow(headsGraphsQuery).Scan(&thread, &id, &name, &fp, &stored); err != nil || name.String != "orders" || fp.String != a.Fingerprint {
		t.Fatalf("first row: %s %s %v %v, %v", thread, id, name, fp, err)
	}
	shell, err := exec.LookPath("sqlite3")
	if err != nil {
		t.Skip("sqlite3 shell not installed")
	}
	closeChecked(t, s)
	out, err := exec.Command(shell, "-readonly", path, headsGraphsQuery, "SELECT topology FROM topologies;").CombinedOutput()
	if err != nil {
		t.Fatalf("sqlite3: %v\n%s", err, out)
	}
	for _, want := range []string{"alpha|" + req.Checkpoint.ID + "|orders|" + a.Fingerprint + "|", "beta|", string(a.Data)} {
		if !strings.Contains(string(out), want) {
			t.Errorf("shell output lacks %q:\n%s", want, out)
		}
	}
}
