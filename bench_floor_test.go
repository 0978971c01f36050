package lockstep_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
)

// recDriver wraps the SQLite driver and, while on, records every statement
// run on any of its connections with its arguments and the connection it
// ran on: the SQL a W3 cycle sends to SQLite, for BenchmarkW3SQLFloor.
type recDriver struct {
	base sqlite3.SQLiteDriver

	mu    sync.Mutex
	on    bool
	conns int
	log   []recStmt
}

type recStmt struct {
	conn  int
	query bool // a query (rows read to the end), not an exec
	sql   string
	args  []driver.NamedValue
}

func (d *recDriver) record(conn int, query bool, q string, args []driver.NamedValue) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.on {
		d.log = append(d.log, recStmt{conn: conn, query: query, sql: q, args: append([]driver.NamedValue(nil), args...)})
	}
}

func (d *recDriver) Open(name string) (driver.Conn, error) {
	c, err := d.base.Open(name)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.conns++
	id := d.conns
	d.mu.Unlock()
	return &recConn{SQLiteConn: c.(*sqlite3.SQLiteConn), d: d, id: id}, nil
}

type recConn struct {
	*sqlite3.SQLiteConn
	d  *recDriver
	id int
}

func (c *recConn) Raw() driver.Conn { return c.SQLiteConn }

func (c *recConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	st, err := c.SQLiteConn.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	return &recStmtW{Stmt: st, c: c, q: q}, nil
}

func (c *recConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	c.d.record(c.id, false, q, args)
	return c.SQLiteConn.ExecContext(ctx, q, args)
}

func (c *recConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	c.d.record(c.id, true, q, args)
	return c.SQLiteConn.QueryContext(ctx, q, args)
}

type recStmtW struct {
	driver.Stmt
	c *recConn
	q string
}

func (s *recStmtW) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.c.d.record(s.c.id, false, s.q, args)
	return s.Stmt.(driver.StmtExecContext).ExecContext(ctx, args)
}

func (s *recStmtW) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.c.d.record(s.c.id, true, s.q, args)
	return s.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
}

// BenchmarkW3SQLFloor measures what W3's cycle costs SQLite alone: it
// records the statements one cycle (run to the interrupt, get state,
// resume to the end) sends through the SQLite saver, then replays them,
// with their recorded arguments and on as many connections, under a new
// thread ID each time, through database/sql prepared statements as the
// saver runs them, on connections set up as the saver's writer is (the
// same synchronous mode and WAL auto-checkpoint). No graph runtime, no
// encoding, no decoding: each statement's handle and arguments are ready
// before the clock starts, so us/cycle is the database/sql, driver and
// SQLite work alone, a floor under BenchmarkW3InterruptResume's us/cycle on
// this machine for this schema, D3's commit per superstep and D5's claim.
// stmts/cycle and tx/cycle say what the cycle is made of.
//
// Each iteration also runs one real W3 cycle on a saver of its own, right
// after the replay, so that the two meet the same moment of a shared
// machine: w3-us/cycle is that cycle, w3/floor its ratio to the replay's
// time, and w3/floor-cpu the same ratio in process CPU time (user and
// system, every thread; where the platform tells it), which the load of
// other processes disturbs least.
func BenchmarkW3SQLFloor(b *testing.B) {
	rd := &recDriver{}
	name := fmt.Sprintf("lockstep-rec-%p", rd)
	sql.Register(name, rd)
	s, err := sqlite.Open(filepath.Join(b.TempDir(), "rec.db"), sqlite.Config{Synchronous: sqlite.SyncNormal, DriverName: name})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	r, err := w3Graph().Compile(graph.WithSaver(s))
	if err != nil {
		b.Fatal(err)
	}
	w3Cycle(b, r, "warm-up") // prepares the statements, fills the caches
	rd.mu.Lock()
	rd.on = true
	rd.mu.Unlock()
	w3Cycle(b, r, thread0)
	rd.mu.Lock()
	rd.on = false
	log := rd.log
	rd.mu.Unlock()

	// The replay database: the same schema and pragmas, through the saver.
	replayPath := filepath.Join(b.TempDir(), "replay.db")
	rs, err := sqlite.Open(replayPath, sqlite.Config{Synchronous: sqlite.SyncNormal})
	if err != nil {
		b.Fatal(err)
	}
	defer rs.Close()
	ctx := context.Background()
	conns := map[int]*sql.Conn{}
	stmts := map[string]*sql.Stmt{}
	// One prepared step per statement of the log: its handle, its
	// arguments, and which of them are the thread ID.
	type step struct {
		p      *sql.Stmt
		query  bool
		sql    string
		args   []any
		thread []int
	}
	steps := make([]step, len(log))
	txs := 0
	for i, st := range log {
		if conns[st.conn] == nil {
			c, err := rs.DB().Conn(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			// As the saver's writer connection is set up (its
			// walAutocheckpoint): the connection that commits decides when
			// the WAL is copied back.
			if _, err := c.ExecContext(ctx, "PRAGMA wal_autocheckpoint = 4000"); err != nil {
				b.Fatal(err)
			}
			conns[st.conn] = c
		}
		key := fmt.Sprint(st.conn, "\x00", st.sql)
		if stmts[key] == nil {
			p, err := conns[st.conn].PrepareContext(ctx, st.sql)
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			stmts[key] = p
		}
		if strings.HasPrefix(st.sql, "BEGIN") {
			txs++
		}
		sp := step{p: stmts[key], query: st.query, sql: st.sql, args: make([]any, len(st.args))}
		for j, a := range st.args {
			v := a.Value
			if v == any(thread0) {
				sp.thread = append(sp.thread, j)
			}
			if a.Name != "" {
				v = sql.Named(a.Name, v)
			}
			sp.args[j] = v
		}
		steps[i] = sp
	}
	replay := func(thread string) {
		for i := range steps {
			st := &steps[i]
			for _, j := range st.thread {
				if na, ok := st.args[j].(sql.NamedArg); ok {
					na.Value = thread
					st.args[j] = na
				} else {
					st.args[j] = thread
				}
			}
			if !st.query {
				if _, err := st.p.ExecContext(ctx, st.args...); err != nil {
					b.Fatalf("replay %q: %v", st.sql, err)
				}
				continue
			}
			rows, err := st.p.QueryContext(ctx, st.args...)
			if err != nil {
				b.Fatalf("replay %q: %v", st.sql, err)
			}
			for rows.Next() {
			}
			if err := rows.Err(); err != nil {
				b.Fatalf("replay %q: %v", st.sql, err)
			}
			rows.Close()
		}
	}
	// The real cycle, on a saver of its own.
	ws, _ := openBenchDB(b, sqlite.SyncNormal)
	wr, err := w3Graph().Compile(graph.WithSaver(ws))
	if err != nil {
		b.Fatal(err)
	}
	w3Cycle(b, wr, "warm-up")
	n := 0
	var total, cycles, totalCPU, cyclesCPU time.Duration
	cpuOK := true
	for b.Loop() {
		thread := "replay-" + strconv.Itoa(n)
		c0, ok0 := processCPU()
		t0 := time.Now()
		replay(thread)
		t1 := time.Now()
		c1, ok1 := processCPU()
		w3Cycle(b, wr, thread)
		t2 := time.Now()
		c2, ok2 := processCPU()
		total += t1.Sub(t0)
		cycles += t2.Sub(t1)
		totalCPU += c1 - c0
		cyclesCPU += c2 - c1
		cpuOK = cpuOK && ok0 && ok1 && ok2
		n++
	}
	// The replay did what the cycle did: the same rows under the new
	// thread ID (a lease or head check that failed would write nothing).
	for _, table := range []string{"checkpoints", "writes", "threads"} {
		var want, got int
		q := "SELECT count(*) FROM " + table + " WHERE thread_id = ?"
		if err := s.DB().QueryRowContext(ctx, q, thread0).Scan(&want); err != nil {
			b.Fatal(err)
		}
		if err := rs.DB().QueryRowContext(ctx, q, "replay-0").Scan(&got); err != nil {
			b.Fatal(err)
		}
		if got != want || want == 0 && table != "writes" {
			b.Fatalf("%s: the replay wrote %d rows for its thread, the cycle %d", table, got, want)
		}
	}
	if testing.Verbose() {
		for _, st := range log {
			b.Logf("conn %d query=%v %s", st.conn, st.query, strings.Join(strings.Fields(st.sql), " "))
		}
	}
	b.ReportMetric(float64(total.Nanoseconds())/1e3/float64(n), "us/cycle")
	b.ReportMetric(float64(len(log)), "stmts/cycle")
	b.ReportMetric(float64(txs), "tx/cycle")
	b.ReportMetric(float64(cycles.Nanoseconds())/1e3/float64(n), "w3-us/cycle")
	b.ReportMetric(float64(cycles)/float64(total), "w3/floor")
	if cpuOK && totalCPU > 0 {
		b.ReportMetric(float64(cyclesCPU)/float64(totalCPU), "w3/floor-cpu")
	}
}

const thread0 = "rec-thread-0001"

// w1TxnPerStep counts the write transactions (BEGIN statements on the
// saver's connections) of w1TxnRuns W1 runs on a fresh SQLite saver at
// sync, compiled with extra, per node step. The runs are apart from the
// timed ones, which run on the plain driver.
func w1TxnPerStep(b *testing.B, sync sqlite.Synchronous, extra ...graph.Option) float64 {
	const w1TxnRuns = 20
	rd := &recDriver{}
	name := fmt.Sprintf("lockstep-txn-%p", rd)
	sql.Register(name, rd)
	s, err := sqlite.Open(filepath.Join(b.TempDir(), "txn.db"), sqlite.Config{Synchronous: sync, DriverName: name})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	r, err := w1Graph().Compile(append([]graph.Option{graph.WithSaver(s)}, extra...)...)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	input := graph.Set(w1State{Count: 0}, "Count")
	if _, err := r.Invoke(ctx, "txn-warm-up", input); err != nil {
		b.Fatal(err)
	}
	rd.mu.Lock()
	rd.on = true
	rd.mu.Unlock()
	for i := range w1TxnRuns {
		if _, err := r.Invoke(ctx, fmt.Sprintf("txn-%d", i), input); err != nil {
			b.Fatal(err)
		}
	}
	rd.mu.Lock()
	defer rd.mu.Unlock()
	rd.on = false
	txs := 0
	for _, st := range rd.log {
		if strings.HasPrefix(st.sql, "BEGIN") {
			txs++
		}
	}
	return float64(txs) / float64(w1TxnRuns*w1Nodes)
}
