package lockstep_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/interrupt"
)

// openBenchDB opens a fresh SQLite saver in a temporary directory.
func openBenchDB(b testing.TB, sync sqlite.Synchronous) (*sqlite.Saver, string) {
	b.Helper()
	path := filepath.Join(b.TempDir(), "bench.db")
	s, err := sqlite.Open(path, sqlite.Config{Synchronous: sync})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s, path
}

// sqliteSavers lists the SQLite savers the shared benchmarks run on.
func sqliteSavers() []benchSaver {
	open := func(sync sqlite.Synchronous) func(b *testing.B) checkpoint.Saver {
		return func(b *testing.B) checkpoint.Saver { s, _ := openBenchDB(b, sync); return s }
	}
	return []benchSaver{
		{"sqlite-normal", open(sqlite.SyncNormal), sqlite.SyncNormal},
		{"sqlite-full", open(sqlite.SyncFull), sqlite.SyncFull},
	}
}

// dbBytes is the size of the database and its WAL after a WAL checkpoint.
func dbBytes(b testing.TB, s *sqlite.Saver, path string) int64 {
	b.Helper()
	if _, err := s.DB().Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		b.Fatal(err)
	}
	var total int64
	for _, p := range []string{path, path + "-wal"} {
		if fi, err := os.Stat(p); err == nil {
			total += fi.Size()
		}
	}
	return total
}

// avgW1CheckpointBytes measures the bytes one W1 checkpoint writes (its
// row with its changed channels and task writes), for the floor
// benchmark's row size.
func avgW1CheckpointBytes(b testing.TB) int {
	s, _ := openBenchDB(b, sqlite.SyncNormal)
	r, err := w1Graph().Compile(graph.WithSaver(s))
	if err != nil {
		b.Fatal(err)
	}
	for i := range 20 {
		if _, err := r.Invoke(context.Background(), fmt.Sprintf("size-%d", i), graph.Set(w1State{}, "Count")); err != nil {
			b.Fatal(err)
		}
	}
	var n, total int64
	q := func(query string) int64 {
		var v int64
		if err := s.DB().QueryRow(query).Scan(&v); err != nil {
			b.Fatal(err)
		}
		return v
	}
	n = q(`SELECT count(*) FROM checkpoints`)
	// A checkpoint row carries its changed channels and the writes of the
	// tasks that produced it; pending writes of unfinished steps live in
	// writes.
	total = q(`SELECT coalesce(sum(length(metadata)+length(versions)+length(checkpoint_id)+coalesce(length(parent_checkpoint_id),0)+length(channels)+coalesce(length(task_writes),0)),0) FROM checkpoints`) +
		q(`SELECT coalesce(sum(length(value)+length(channel)+length(task_id)),0) FROM writes`)
	return int(total / n)
}

// BenchmarkSQLiteFloor: the physical floor, one transaction inserting one
// row whose blob is the size of an average W1 checkpoint, on a dedicated
// connection with prepared statements, as the peer's floor program does
// (docs/benchmarks.md). cpu-us/txn is the process's CPU time per
// transaction (W1's cpu-us/step is its counterpart).
func BenchmarkSQLiteFloor(b *testing.B) {
	size := avgW1CheckpointBytes(b)
	for _, sync := range []sqlite.Synchronous{sqlite.SyncNormal, sqlite.SyncFull} {
		b.Run("sync="+strings.ToLower(string(sync)), func(b *testing.B) {
			f := openSQLiteFloor(b, sync, size)
			cpu0, cpuOK := processCPU()
			for b.Loop() {
				f.txn(b)
			}
			cpu1, _ := processCPU()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(f.n), "us/txn")
			if cpuOK {
				b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/1e3/float64(f.n), "cpu-us/txn")
			}
			b.ReportMetric(float64(size), "row-bytes")
		})
	}
}

// sqliteFloor is BenchmarkSQLiteFloor's transaction on a fresh file.
type sqliteFloor struct {
	begin, insert, commit *sql.Stmt
	payload               []byte
	n                     int
}

// openSQLiteFloor opens a fresh file at sync with the floor's table and
// statements, closed at cleanup.
func openSQLiteFloor(b testing.TB, sync sqlite.Synchronous, size int) *sqliteFloor {
	b.Helper()
	s, _ := openBenchDB(b, sync)
	ctx := context.Background()
	conn, err := s.DB().Conn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, `CREATE TABLE floor(thread_id TEXT, checkpoint_id TEXT, parent TEXT, payload BLOB, PRIMARY KEY(thread_id, checkpoint_id))`); err != nil {
		b.Fatal(err)
	}
	f := &sqliteFloor{payload: []byte(strings.Repeat("x", size))}
	f.begin, _ = conn.PrepareContext(ctx, "BEGIN IMMEDIATE")
	f.insert, _ = conn.PrepareContext(ctx, "INSERT INTO floor VALUES (?, ?, ?, ?)")
	f.commit, _ = conn.PrepareContext(ctx, "COMMIT")
	b.Cleanup(func() {
		f.begin.Close()
		f.insert.Close()
		f.commit.Close()
		conn.Close()
	})
	return f
}

// txn runs one floor transaction.
func (f *sqliteFloor) txn(b testing.TB) {
	ctx := context.Background()
	if _, err := f.begin.ExecContext(ctx); err != nil {
		b.Fatal(err)
	}
	if _, err := f.insert.ExecContext(ctx, "t", fmt.Sprintf("%012d", f.n), fmt.Sprintf("%012d", f.n-1), f.payload); err != nil {
		b.Fatal(err)
	}
	if _, err := f.commit.ExecContext(ctx); err != nil {
		b.Fatal(err)
	}
	f.n++
}

// sqliteFloorUs measures the floor at sync: us per transaction over n
// transactions after a few to warm up, on a fresh file.
func sqliteFloorUs(b testing.TB, sync sqlite.Synchronous, size, n int) float64 {
	f := openSQLiteFloor(b, sync, size)
	for range 10 {
		f.txn(b)
	}
	start := time.Now()
	for range n {
		f.txn(b)
	}
	return float64(time.Since(start).Nanoseconds()) / 1e3 / float64(n)
}

// Message is a W2 chat message (about 1 KiB as JSON).
type Message struct {
	ID      string `json:"id"`
	Role    string `json:"role"`
	Content string `json:"content"`
}

type w2State struct {
	Messages []Message `lockstep:"append"`
}

// w2Graph is agent ⇄ tools for steps supersteps, each appending one ~1 KiB
// message; stamps records the start of every node.
func w2Graph(steps int, stamps *[]time.Time) *graph.Graph[w2State] {
	pad := strings.Repeat("x", 1024-len(`{"id":"m0000","role":"assistant","content":"0000:"}`))
	node := func(role string) graph.NodeFunc[w2State] {
		return func(ctx context.Context, s w2State) (graph.Update[w2State], error) {
			*stamps = append(*stamps, time.Now())
			k := len(s.Messages)
			return graph.Set(w2State{Messages: []Message{{ID: fmt.Sprintf("m%d", k), Role: role, Content: fmt.Sprintf("%d:%s", k, pad)}}}, "Messages"), nil
		}
	}
	route := func(next string) graph.Router[w2State] {
		return func(ctx context.Context, s w2State) ([]string, error) {
			if len(s.Messages) >= steps {
				return []string{graph.END}, nil
			}
			return []string{next}, nil
		}
	}
	return graph.New[w2State]().
		AddNode("agent", node("assistant")).AddNode("tools", node("tool")).
		AddEdge(graph.START, "agent").
		AddConditionalEdges("agent", route("tools"), "tools", graph.END).
		AddConditionalEdges("tools", route("agent"), "agent", graph.END)
}

const w2Steps = 1000

// runW2 builds the W2 thread on s and returns the node start times.
func runW2(b testing.TB, s checkpoint.Saver, thread string) []time.Time {
	var stamps []time.Time
	r, err := w2Graph(w2Steps, &stamps).Compile(graph.WithSaver(s), graph.WithRecursionLimit(w2Steps+10))
	if err != nil {
		b.Fatal(err)
	}
	res, err := r.Invoke(context.Background(), thread, graph.Update[w2State]{})
	if err != nil || len(res.Values.Messages) != w2Steps {
		b.Fatalf("W2 run: %v (%d messages)", err, len(res.Values.Messages))
	}
	return stamps
}

// BenchmarkW2Growth: one thread, a two-node loop for 1000 supersteps, each
// appending a 1 KiB message. ms/total per run; last50/first50 compares the
// time of the last 50 steps with the first 50; disk/payload is database plus
// WAL bytes (after a WAL checkpoint) over the 1000 KiB written.
func BenchmarkW2Growth(b *testing.B) {
	b.Run("saver=sqlite-normal", func(b *testing.B) {
		var ratios, disk []float64
		for b.Loop() {
			b.StopTimer()
			s, path := openBenchDB(b, sqlite.SyncNormal)
			b.StartTimer()
			stamps := runW2(b, s, "w2")
			b.StopTimer()
			first := stamps[50].Sub(stamps[0])
			last := stamps[len(stamps)-1].Sub(stamps[len(stamps)-51])
			ratios = append(ratios, float64(last)/float64(first))
			disk = append(disk, float64(dbBytes(b, s, path))/float64(w2Steps*1024))
			b.StartTimer()
		}
		b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(len(ratios)), "ms/total")
		b.ReportMetric(median(ratios), "last50/first50")
		b.ReportMetric(median(disk), "disk/payload")
	})
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkW5History: on the W2 thread, the full history (1002 snapshots,
// values included) in ms/history and the latest state in us/getstate, from
// a Runnable that holds the thread's decoded state (as the process that ran
// it does) and, as us/getstate-cold, from a fresh Runnable every time.
func BenchmarkW5History(b *testing.B) {
	b.Run("saver=sqlite-normal", func(b *testing.B) {
		s, _ := openBenchDB(b, sqlite.SyncNormal)
		runW2(b, s, "w5")
		ctx := context.Background()
		var stamps []time.Time
		compile := func() *graph.Runnable[w2State] {
			r, err := w2Graph(w2Steps, &stamps).Compile(graph.WithSaver(s))
			if err != nil {
				b.Fatal(err)
			}
			return r
		}
		r := compile()
		if _, err := r.GetState(ctx, "w5"); err != nil { // warm the state cache
			b.Fatal(err)
		}
		const gets = 20
		var histDur, getDur, coldDur time.Duration
		n := 0
		for b.Loop() {
			t0 := time.Now()
			h, err := r.History(ctx, "w5", graph.HistoryOptions{})
			if err != nil || len(h) != w2Steps+2 || len(h[0].Values.Messages) != w2Steps {
				b.Fatalf("history: %v (%d snapshots)", err, len(h))
			}
			histDur += time.Since(t0)
			t0 = time.Now()
			for range gets {
				st, err := r.GetState(ctx, "w5")
				if err != nil || len(st.Values.Messages) != w2Steps {
					b.Fatalf("getstate: %v", err)
				}
			}
			getDur += time.Since(t0)
			cold := compile()
			t0 = time.Now()
			if _, err := cold.GetState(ctx, "w5"); err != nil {
				b.Fatal(err)
			}
			coldDur += time.Since(t0)
			n++
		}
		b.ReportMetric(float64(histDur.Microseconds())/1e3/float64(n), "ms/history")
		b.ReportMetric(float64(getDur.Microseconds())/float64(n*gets), "us/getstate")
		b.ReportMetric(float64(coldDur.Microseconds())/float64(n), "us/getstate-cold")
	})
}

type w3State struct {
	Count  int
	Answer string
	Log    []string `lockstep:"append"`
}

func w3Graph() *graph.Graph[w3State] {
	step := func(name string) graph.NodeFunc[w3State] {
		return func(ctx context.Context, s w3State) (graph.Update[w3State], error) {
			return graph.Set(w3State{Count: s.Count + 1, Log: []string{name}}, "Count", "Log"), nil
		}
	}
	return graph.New[w3State]().
		AddNode("n1", step("n1")).AddNode("n2", step("n2")).
		AddNode("n3", func(ctx context.Context, s w3State) (graph.Update[w3State], error) {
			ans, err := interrupt.Ask[string](ctx, map[string]any{"question": "approve?", "count": s.Count})
			if err != nil {
				return graph.Update[w3State]{}, err
			}
			return graph.Set(w3State{Count: s.Count + 1, Answer: ans, Log: []string{"n3"}}, "Count", "Answer", "Log"), nil
		}).
		AddNode("n4", step("n4")).AddNode("n5", step("n5")).
		AddEdge(graph.START, "n1").AddEdge("n1", "n2").AddEdge("n2", "n3").AddEdge("n3", "n4").AddEdge("n4", "n5").AddEdge("n5", graph.END)
}

// w3Cycle runs one W3 cycle: invoke to the interrupt, get state (checking
// Next and the interrupt), resume to the end. It returns the time of the
// get state.
func w3Cycle(b testing.TB, r *graph.Runnable[w3State], thread string) time.Duration {
	ctx := context.Background()
	res, err := r.Invoke(ctx, thread, graph.Set(w3State{Count: 0}, "Count"))
	if err != nil || res.Status != graph.StatusWaiting {
		b.Fatalf("invoke: %v %v", res.Status, err)
	}
	t0 := time.Now()
	s, err := r.GetState(ctx, thread)
	d := time.Since(t0)
	if err != nil || !slices.Equal(s.Next, []string{"n3"}) || len(s.Tasks) != 1 || len(s.Tasks[0].Interrupts) != 1 {
		b.Fatalf("get state: %v %+v", err, s)
	}
	res, err = r.Resume(ctx, thread, graph.Command[w3State]{Resume: "yes"})
	if err != nil || res.Status != graph.StatusDone || res.Values.Count != 5 {
		b.Fatalf("resume: %v %+v", err, res)
	}
	return d
}

// BenchmarkW3InterruptResume: a 5-node chain whose third node asks; one
// cycle = run to the interrupt, get state, resume to the end. us/cycle and
// us/getstate on an empty database, and prefilled/empty: the same cycle on a
// database already holding 5,000 completed threads.
func BenchmarkW3InterruptResume(b *testing.B) {
	b.Run("saver=sqlite-normal", func(b *testing.B) {
		empty, _ := openBenchDB(b, sqlite.SyncNormal)
		full, _ := openBenchDB(b, sqlite.SyncNormal)
		re, err := w3Graph().Compile(graph.WithSaver(empty))
		if err != nil {
			b.Fatal(err)
		}
		rf, err := w3Graph().Compile(graph.WithSaver(full))
		if err != nil {
			b.Fatal(err)
		}
		const prefill = 5000
		for i := range prefill {
			w3Cycle(b, rf, fmt.Sprintf("prefill-%d", i))
		}
		var emptyDur, fullDur, getDur time.Duration
		n := 0
		b.ResetTimer()
		for b.Loop() {
			t0 := time.Now()
			getDur += w3Cycle(b, re, fmt.Sprintf("e-%d", n))
			emptyDur += time.Since(t0)
			t0 = time.Now()
			w3Cycle(b, rf, fmt.Sprintf("f-%d", n))
			fullDur += time.Since(t0)
			n++
		}
		b.ReportMetric(float64(emptyDur.Microseconds())/float64(n), "us/cycle")
		b.ReportMetric(float64(getDur.Nanoseconds())/1e3/float64(n), "us/getstate")
		b.ReportMetric(float64(fullDur)/float64(emptyDur), "prefilled/empty")
	})
	b.Run("saver=postgres", w3Postgres)
}

// timedSaver times each call the runtime makes to a SQLite saver, by kind.
// Its overrides are the calls a W3 cycle makes; everything else is the
// embedded saver's.
type timedSaver struct {
	*sqlite.Saver
	spent map[string]time.Duration
	calls map[string]int
}

func (t *timedSaver) done(kind string, start time.Time) {
	t.spent[kind] += time.Since(start)
	t.calls[kind]++
}

func (t *timedSaver) Get(ctx context.Context, ref checkpoint.Ref, opts checkpoint.GetOptions) (*checkpoint.Tuple, error) {
	defer t.done("get", time.Now())
	return t.Saver.Get(ctx, ref, opts)
}

func (t *timedSaver) Put(ctx context.Context, req checkpoint.PutRequest) error {
	defer t.done("put", time.Now())
	return t.Saver.Put(ctx, req)
}

func (t *timedSaver) PutChain(ctx context.Context, reqs []checkpoint.PutRequest) error {
	defer t.done(fmt.Sprintf("put%d", len(reqs)), time.Now())
	return t.Saver.PutChain(ctx, reqs)
}

func (t *timedSaver) PutWrites(ctx context.Context, req checkpoint.WritesRequest) error {
	defer t.done("writes", time.Now())
	return t.Saver.PutWrites(ctx, req)
}

func (t *timedSaver) Claim(ctx context.Context, ref checkpoint.Ref, l checkpoint.Lease) error {
	defer t.done("claim", time.Now())
	return t.Saver.Claim(ctx, ref, l)
}

// BenchmarkW3Breakdown runs W3's cycle on an empty database through
// timedSaver and reports where a cycle's time goes: us/cycle, and for
// each kind of saver call its mean time (us/KIND) and calls per cycle
// (KIND/cycle): put1 (one checkpoint), put2 (a new thread's input and
// START checkpoints, one transaction), writes (the interrupt), claim (the
// resume's), get. us/runtime is the rest of the cycle: the graph runtime.
func BenchmarkW3Breakdown(b *testing.B) {
	s, _ := openBenchDB(b, sqlite.SyncNormal)
	ts := &timedSaver{Saver: s, spent: map[string]time.Duration{}, calls: map[string]int{}}
	r, err := w3Graph().Compile(graph.WithSaver(ts))
	if err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	n := 0
	for b.Loop() {
		t0 := time.Now()
		w3Cycle(b, r, fmt.Sprintf("b-%d", n))
		total += time.Since(t0)
		n++
	}
	saver := time.Duration(0)
	for kind, d := range ts.spent {
		saver += d
		b.ReportMetric(float64(d.Nanoseconds())/1e3/float64(ts.calls[kind]), "us/"+kind)
		b.ReportMetric(float64(ts.calls[kind])/float64(n), kind+"/cycle")
	}
	b.ReportMetric(float64(total.Nanoseconds())/1e3/float64(n), "us/cycle")
	b.ReportMetric(float64((total-saver).Nanoseconds())/1e3/float64(n), "us/runtime")
}

// BenchmarkGetStateWarm: GetState of W3's thread waiting at its interrupt,
// read again and again (the saver's head cache is warm): the get-state of
// W3's cycle without the rest of the cycle around it.
func BenchmarkGetStateWarm(b *testing.B) {
	s, _ := openBenchDB(b, sqlite.SyncNormal)
	r, err := w3Graph().Compile(graph.WithSaver(s))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	// As in W3's cycles after the first: the saver has read a head back
	// before (so its head cache knows the file's data_version), and the
	// entry read is the one the run's saves recorded.
	for _, thread := range []string{"before", "warm"} {
		res, err := r.Invoke(ctx, thread, graph.Set(w3State{Count: 0}, "Count"))
		if err != nil || res.Status != graph.StatusWaiting {
			b.Fatalf("invoke: %v %v", res.Status, err)
		}
		if _, err := r.GetState(ctx, "before"); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		st, err := r.GetState(ctx, "warm")
		if err != nil || len(st.Next) != 1 || len(st.Tasks) != 1 || len(st.Tasks[0].Interrupts) != 1 {
			b.Fatalf("get state: %v %+v", err, st)
		}
	}
}
