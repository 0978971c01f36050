package lockstep_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/postgres"
)

// The Postgres benchmarks run against LOCKSTEP_POSTGRES_URL (.ci/postgres.sh
// starts a throwaway cluster); without it they skip, saying so.

// roundTrips counts the statements and batches a pool sends: each is one
// round trip to the server (a batch is sent and read as one).
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// openBenchPostgres opens the stores in a fresh schema of the benchmark
// database, dropped when b ends; it skips b without a database URL.
func openBenchPostgres(b testing.TB, tracer pgx.QueryTracer) *postgres.DB {
	b.Helper()
	url := os.Getenv("LOCKSTEP_POSTGRES_URL")
	if url == "" {
		b.Skip("LOCKSTEP_POSTGRES_URL not set: the Postgres benchmarks skip (eval \"$(.ci/postgres.sh start /tmp/lockstep-pg)\" starts a cluster)")
	}
	var r [6]byte
	_, _ = rand.Read(r[:])
	schema := "bench_" + hex.EncodeToString(r[:])
	db, err := postgres.Open(context.Background(), url, postgres.Config{Schema: schema, Tracer: tracer})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		db.Close()
		ctx := context.Background()
		if conn, err := pgx.Connect(ctx, url); err == nil {
			conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
			conn.Close(ctx)
		}
	})
	return db
}

// postgresSavers lists the Postgres saver the shared benchmarks run on.
func postgresSavers() []benchSaver {
	return []benchSaver{{"postgres", func(b *testing.B) checkpoint.Saver { return openBenchPostgres(b, nil).Saver() }, ""}}
}

// BenchmarkPostgresW1RoundTrips: W1 on Postgres, counting round trips to
// the server: trips/step (per node step) and trips/run. BenchmarkW1Linear's
// saver=postgres is the timing.
func BenchmarkPostgresW1RoundTrips(b *testing.B) {
	rt := &roundTrips{}
	db := openBenchPostgres(b, rt)
	r, err := w1Graph().Compile(graph.WithSaver(db.Saver()))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := r.Invoke(ctx, "warm", graph.Set(w1State{}, "Count")); err != nil { // stores the topology
		b.Fatal(err)
	}
	rt.n.Store(0)
	n := 0
	for b.Loop() {
		if _, err := r.Invoke(ctx, fmt.Sprintf("w1-%d", n), graph.Set(w1State{}, "Count")); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64(rt.n.Load())/float64(n*w1Nodes), "trips/step")
	b.ReportMetric(float64(rt.n.Load())/float64(n), "trips/run")
}

// BenchmarkPostgresFloor: the physical floor on the same server, one
// transaction (BEGIN, INSERT, COMMIT on one connection, prepared) inserting
// one row whose payload is the size of an average W1 checkpoint, with
// synchronous_commit on (the server's default, which .ci/postgres.sh
// keeps).
func BenchmarkPostgresFloor(b *testing.B) {
	size := avgW1CheckpointBytes(b)
	db := openBenchPostgres(b, nil)
	f := openPostgresFloor(b, db, size)
	defer f.conn.Release()
	for b.Loop() {
		f.txn(b)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(f.n), "us/txn")
	b.ReportMetric(float64(size), "row-bytes")
}

// postgresFloor is BenchmarkPostgresFloor's table and connection.
type postgresFloor struct {
	conn    *pgxpool.Conn
	insert  string
	payload []byte
	n       int
}

// openPostgresFloor creates the floor's table in db's schema, on a
// connection it holds (release f.conn when done).
func openPostgresFloor(b testing.TB, db *postgres.DB, size int) *postgresFloor {
	ctx := context.Background()
	conn, err := db.Pool().Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var sc string
	if err := conn.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&sc); err != nil || sc != "on" {
		conn.Release()
		b.Fatalf("synchronous_commit = %q (%v), want on", sc, err)
	}
	table := pgx.Identifier{db.Schema(), "floor"}.Sanitize()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (thread_id text, checkpoint_id text, parent text, payload bytea, PRIMARY KEY (thread_id, checkpoint_id))`); err != nil {
		conn.Release()
		b.Fatal(err)
	}
	return &postgresFloor{conn: conn, insert: `INSERT INTO ` + table + ` VALUES ($1, $2, $3, $4)`, payload: []byte(strings.Repeat("x", size))}
}

// txn commits one floor transaction.
func (f *postgresFloor) txn(b testing.TB) {
	ctx := context.Background()
	tx, err := f.conn.Begin(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := tx.Exec(ctx, f.insert, "t", fmt.Sprintf("%012d", f.n), fmt.Sprintf("%012d", f.n-1), f.payload); err != nil {
		b.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		b.Fatal(err)
	}
	f.n++
}

// postgresFloorUs measures the floor's us/txn over n transactions after a
// warm-up, for the benchmarks that report a ratio to it.
func postgresFloorUs(b testing.TB, db *postgres.DB, size, n int) float64 {
	f := openPostgresFloor(b, db, size)
	defer f.conn.Release()
	for range 10 {
		f.txn(b)
	}
	start := time.Now()
	for range n {
		f.txn(b)
	}
	return float64(time.Since(start).Nanoseconds()) / 1e3 / float64(n)
}

// w3Postgres is BenchmarkW3InterruptResume's saver=postgres: us/cycle,
// us/getstate and trips/cycle (round trips to the server per cycle) on
// an empty schema.
func w3Postgres(b *testing.B) {
	rt := &roundTrips{}
	db := openBenchPostgres(b, rt)
	r, err := w3Graph().Compile(graph.WithSaver(db.Saver()))
	if err != nil {
		b.Fatal(err)
	}
	w3Cycle(b, r, "warm") // stores the topology
	rt.n.Store(0)
	var getDur time.Duration
	n := 0
	for b.Loop() {
		getDur += w3Cycle(b, r, fmt.Sprintf("e-%d", n))
		n++
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(n), "us/cycle")
	b.ReportMetric(float64(getDur.Nanoseconds())/1e3/float64(n), "us/getstate")
	b.ReportMetric(float64(rt.n.Load())/float64(n), "trips/cycle")
}
