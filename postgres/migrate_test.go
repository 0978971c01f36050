package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// helperOpen opens the database of LOCKSTEP_POSTGRES_URL in the schema
// LOCKSTEP_POSTGRES_SCHEMA and exits 0, or prints the error and exits 1.
func helperOpen() int {
	db, err := Open(context.Background(), os.Getenv("LOCKSTEP_POSTGRES_URL"), Config{Schema: os.Getenv("LOCKSTEP_POSTGRES_SCHEMA"), MaxConns: 1})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	db.Close()
	return 0
}

// schemaRows returns the rows of a schema's version table.
func schemaRows(t *testing.T, url, schema string) []int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT version FROM `+pgx.Identifier{schema, "schema_version"}.Sanitize()+` ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int, len(vs))
	for i, v := range vs {
		out[i] = int(v)
	}
	return out
}

// TestMigrateOnceUnderConcurrentOpens: 16 goroutines and 4 processes open
// one new schema at the same moment; every one succeeds, the version is
// recorded once, and the tables exist once (a CREATE TABLE run twice
// would fail the second opener).
func TestMigrateOnceUnderConcurrentOpens(t *testing.T) {
	url := testURL(t)
	schema := newSchemaName()
	t.Cleanup(func() { dropSchema(t, url, schema) })
	var procs []*exec.Cmd
	for range 4 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"=open", "LOCKSTEP_POSTGRES_SCHEMA="+schema)
		procs = append(procs, cmd)
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make([]error, 16+len(procs))
	for i := range 16 {
		wg.Go(func() {
			<-start
			db, err := Open(context.Background(), url, Config{Schema: schema, MaxConns: 1})
			if err == nil {
				db.Close()
			}
			errs[i] = err
		})
	}
	for i, cmd := range procs {
		wg.Go(func() {
			<-start
			out, err := cmd.CombinedOutput()
			if err != nil {
				err = fmt.Errorf("process: %v: %s", err, out)
			}
			errs[16+i] = err
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("opener %d: %v", i, err)
		}
	}
	if got := schemaRows(t, url, schema); len(got) != SchemaVersion || got[len(got)-1] != SchemaVersion {
		t.Errorf("schema_version holds %v, want 1 to %d once each", got, SchemaVersion)
	}
}

// snapshotSchema lists what a database holds in schema (tables and their
// row counts), to check that a refused Open changed nothing.
func snapshotSchema(t *testing.T, url, schema string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 ORDER BY 1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	type obj struct {
		Name string
		Kind string
	}
	objs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[obj])
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, o := range objs {
		fmt.Fprintf(&b, "%s %s", o.Name, o.Kind)
		if o.Kind == "r" {
			var n int64
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, o.Name}.Sanitize()).Scan(&n); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, " %d rows", n)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func execSQL(t *testing.T, url string, stmts ...string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// TestOpenRefuses: a URL that is not PostgreSQL's, a server that is not
// PostgreSQL, a schema of another application, a schema of a newer
// lockstep and a damaged version table are each a typed error, and the
// database is left as it was.
func TestOpenRefuses(t *testing.T) {
	url := testURL(t)
	ctx := context.Background()

	for _, bad := range []string{"/tmp/lockstep.db", "mysql://root@localhost/db", "file:lockstep.db?mode=ro", "", "postgres://%zz"} {
		_, err := Open(ctx, bad, Config{})
		var ce *ConfigError
		if !errors.Is(err, ErrNotPostgres) || !errors.As(err, &ce) {
			t.Errorf("Open(%q) = %v, want a *ConfigError matching ErrNotPostgres", bad, err)
		}
	}
	// A server that answers, but not as PostgreSQL does.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"))
			c.Close()
		}
	}()
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	_, err = Open(cctx, "postgres://u@"+ln.Addr().String()+"/db?sslmode=disable&connect_timeout=5", Config{})
	cancel()
	if !errors.Is(err, ErrNotPostgres) && !errors.Is(err, ErrUnavailable) {
		t.Errorf("Open of an HTTP server = %v, want ErrNotPostgres or ErrUnavailable", err)
	}
	if err != nil && strings.Contains(err.Error(), "password") {
		t.Errorf("the error names a password: %v", err)
	}

	cases := []struct {
		name  string
		setup []string
		want  error
	}{
		{"another application's schema", []string{`CREATE SCHEMA $S`, `CREATE TABLE $S.orders (id int PRIMARY KEY)`, `INSERT INTO $S.orders VALUES (1)`}, ErrNotLockstep},
		{"a version table that is not lockstep's", []string{`CREATE SCHEMA $S`, `CREATE TABLE $S.schema_version (version int)`, `INSERT INTO $S.schema_version VALUES (1)`}, ErrNotLockstep},
		{"a newer lockstep", nil, ErrSchemaTooNew},
		{"a damaged version table", nil, ErrSchemaInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			schema := newSchemaName()
			t.Cleanup(func() { dropSchema(t, url, schema) })
			q := pgx.Identifier{schema}.Sanitize()
			switch tc.want {
			case ErrSchemaTooNew, ErrSchemaInvalid:
				db, err := Open(ctx, url, Config{Schema: schema})
				if err != nil {
					t.Fatal(err)
				}
				db.Close()
				v := SchemaVersion + 1
				if tc.want == ErrSchemaInvalid {
					v = SchemaVersion + 2 // a gap
				}
				execSQL(t, url, fmt.Sprintf(`INSERT INTO %s.schema_version (version) VALUES (%d)`, q, v))
			default:
				var stmts []string
				for _, s := range tc.setup {
					stmts = append(stmts, strings.ReplaceAll(s, "$S", q))
				}
				execSQL(t, url, stmts...)
			}
			before := snapshotSchema(t, url, schema)
			for _, open := range []func(context.Context, string, Config) (*DB, error){Open, OpenExisting} {
				db, err := open(ctx, url, Config{Schema: schema})
				if err == nil {
					db.Close()
				}
				if !errors.Is(err, tc.want) {
					t.Errorf("open: %v, want an error matching %v", err, tc.want)
				}
			}
			if after := snapshotSchema(t, url, schema); after != before {
				t.Errorf("a refused Open changed the schema:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}

	t.Run("OpenExisting on an empty database", func(t *testing.T) {
		schema := newSchemaName()
		_, err := OpenExisting(ctx, url, Config{Schema: schema})
		if !errors.Is(err, ErrNotLockstep) {
			t.Errorf("OpenExisting of a schema that does not exist: %v, want ErrNotLockstep", err)
		}
		if s := snapshotSchema(t, url, schema); s != "" {
			t.Errorf("OpenExisting created %s", s)
		}
	})
}

// TestMigrateForwardFromVersion1: a schema at version 1 (no topologies)
// holding a thread is brought to SchemaVersion by 8 openers at once: each
// succeeds, every version is recorded once, the thread reads back as it
// was, and the tables of the later versions work.
func TestMigrateForwardFromVersion1(t *testing.T) {
	url := testURL(t)
	schema := newSchemaName()
	t.Cleanup(func() { dropSchema(t, url, schema) })
	q := pgx.Identifier{schema}.Sanitize()
	execSQL(t, url, `CREATE SCHEMA `+q, sqlFor(schema, versionTable), sqlFor(schema, migrations[0]),
		sqlFor(schema, `INSERT INTO $S.schema_version (version) VALUES (1)`),
		sqlFor(schema, `INSERT INTO $S.threads (thread_id, checkpoint_ns, lease_owner, lease_epoch, lease_until, updated_at) VALUES ('thread-1', '', 'run-1', 3, 1, 1)`),
		sqlFor(schema, `INSERT INTO $S.ledger (key, tool, args_hash, state, result, owner, lease_until, created_at, completed_at, thread_id, run_id)
			VALUES ('key-1', 'charge', 'hash-1', 'done', '{"id": 7}', 'run-1', 5, 1, 2, 'thread-1', 'run-1')`))
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			<-start
			db, err := Open(context.Background(), url, Config{Schema: schema, MaxConns: 1})
			if err == nil {
				db.Close()
			}
			errs[i] = err
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("opener %d: %v", i, err)
		}
	}
	want := []int{}
	for v := 1; v <= SchemaVersion; v++ {
		want = append(want, v)
	}
	if got := schemaRows(t, url, schema); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("schema_version holds %v, want %v", got, want)
	}
	db := openTest(t, Config{Schema: schema, MaxConns: 2})
	info, err := db.Saver().Lease(t.Context(), "thread-1", "")
	if err != nil || info.Owner != "run-1" || info.Epoch != 3 {
		t.Errorf("Lease(thread-1) after the migration = %+v, %v; want owner run-1, epoch 3", info, err)
	}
	if e, err := db.Ledger().Get(t.Context(), "key-1"); err != nil || string(e.Outcome.Result) != `{"id": 7}` {
		t.Errorf("Ledger.Get(key-1) after the migration = %+v, %v; want the done record of version 1, its checksum computed", e, err)
	}
	data := []byte(`{"name":"orders","nodes":["a"]}`)
	tp := checkpoint.Topology{Fingerprint: checkpoint.TopologyFingerprint(data), Name: "orders", Data: data}
	if err := db.Saver().PutTopology(t.Context(), tp); err != nil {
		t.Fatalf("PutTopology after the migration: %v", err)
	}
	if got, err := db.Saver().LatestTopology(t.Context(), "orders"); err != nil || string(got.Data) != string(data) {
		t.Errorf("LatestTopology after the migration = %s, %v; want %s", got.Data, err, data)
	}
	// Version 3's due work: the thread of version 1, whose lease lapsed
	// unreleased, is due; input queues.
	if _, _, err := db.Saver().Enqueue(t.Context(), checkpoint.QueuedInput{Thread: "thread-2", Key: "k", Input: []byte(`{}`)}); err != nil {
		t.Fatalf("Enqueue after the migration: %v", err)
	}
	b, err := db.Saver().ClaimDue(t.Context(), checkpoint.DueQuery{Owners: []string{"w-1", "w-2", "w-3"}, TTL: time.Minute})
	if err != nil || len(b.Threads) != 2 || b.Threads[0].Thread != "thread-1" || b.Threads[0].Reason != checkpoint.DueExpired || b.Threads[0].Epoch != 4 || b.Threads[1].Thread != "thread-2" {
		t.Errorf("ClaimDue after the migration = %+v, %v; want thread-1 (expired, epoch 4), then thread-2", b.Threads, err)
	}
}
