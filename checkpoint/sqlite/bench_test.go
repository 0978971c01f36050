package sqlite

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
)

var benchSyncs = []Synchronous{SyncNormal, SyncFull}

// w1Requests returns the Puts of one W1 run (a 10-node chain: an input
// checkpoint and 11 loop checkpoints, each with 2-3 small blobs and the
// finished task's 2-3 writes as ParentWrites), shaped as the graph runtime
// sends them.
func w1Requests(ids *checkpoint.IDGenerator, thread string) []checkpoint.PutRequest {
	owner := checkpoint.NewOwnerID(nil)
	lease := checkpoint.Lease{Owner: owner, TTL: 30 * time.Second}
	var reqs []checkpoint.PutRequest
	parent, logVersion := "", ""
	for step := -1; step <= 10; step++ {
		id := ids.Next(parent)
		cp := checkpoint.Checkpoint{
			ID: id, ParentID: parent, CreatedAt: time.Now(),
			Metadata: checkpoint.Metadata{Source: checkpoint.SourceLoop, Step: step, Parents: map[string]string{}, RunID: owner},
			Versions: map[string]string{}, Channels: map[string][]checkpoint.Blob{},
		}
		var writes []checkpoint.TaskWrites
		if step == -1 {
			cp.Metadata.Source = checkpoint.SourceInput
			cp.Versions[checkpoint.ChannelStart] = id
			cp.Channels[checkpoint.ChannelStart] = []checkpoint.Blob{{Version: id, Data: json.RawMessage(`{"Count":0}`)}}
		} else {
			cp.Versions["Count"] = id
			cp.Channels["Count"] = []checkpoint.Blob{{Version: id, Data: json.RawMessage(strconv.Itoa(step))}}
			tw := checkpoint.TaskWrites{TaskID: checkpoint.NewOwnerID(nil), Node: fmt.Sprintf("n%d", step), Path: "pull",
				Writes: []checkpoint.Write{{Channel: "Count", Value: json.RawMessage(strconv.Itoa(step))}}}
			if step > 0 {
				cp.Versions["Log"] = id
				cp.Channels["Log"] = []checkpoint.Blob{{Version: id, Append: true, Base: logVersion, Data: json.RawMessage(`["0123456789abcdef"]`)}}
				logVersion = id
				tw.Writes = append(tw.Writes, checkpoint.Write{Channel: "Log", Value: json.RawMessage(`["0123456789abcdef"]`)})
			}
			if step < 10 {
				ch := fmt.Sprintf("branch:to:n%d", step+1)
				cp.Versions[ch] = id
				cp.Channels[ch] = []checkpoint.Blob{{Version: id, Data: json.RawMessage(`null`)}}
				tw.Writes = append(tw.Writes, checkpoint.Write{Channel: ch, Value: json.RawMessage(`null`)})
			}
			writes = append(writes, tw)
		}
		reqs = append(reqs, checkpoint.PutRequest{Thread: thread, Checkpoint: cp, ParentWrites: writes, Lease: lease, Release: step == 10})
		parent = id
	}
	return reqs
}

// BenchmarkPut measures one W1-shaped Put (us/put), the number to hold
// against the SQLite floor of one BEGIN/INSERT/COMMIT (BenchmarkSQLiteFloor).
func BenchmarkPut(b *testing.B) {
	for _, sync := range benchSyncs {
		b.Run("sync="+string(sync), func(b *testing.B) {
			s := openTemp(b, Config{Synchronous: sync})
			ids := checkpoint.NewIDGenerator(nil, nil)
			ctx := context.Background()
			var reqs []checkpoint.PutRequest
			thread := 0
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				if len(reqs) == 0 {
					b.StopTimer()
					thread++
					reqs = w1Requests(ids, "w1-"+strconv.Itoa(thread))
					b.StartTimer()
				}
				if err := s.Put(ctx, reqs[0]); err != nil {
					b.Fatal(err)
				}
				reqs = reqs[1:]
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N), "us/put")
		})
	}
}

// BenchmarkSQLiteFloor measures the floor the root's BenchmarkSQLiteFloor
// and the LangGraph JS peer's floor program measure (docs/benchmarks.md): one
// transaction (BEGIN; INSERT one 598-byte row; COMMIT) on a dedicated
// connection with prepared statements, in the same process and run as the
// Put benchmark.
func BenchmarkSQLiteFloor(b *testing.B) {
	for _, sync := range benchSyncs {
		b.Run("sync="+string(sync), func(b *testing.B) {
			ctx := context.Background()
			db, err := sql.Open("sqlite3", filepath.Join(b.TempDir(), "floor.db")+"?_journal_mode=WAL&_synchronous="+string(sync))
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			conn, err := db.Conn(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.ExecContext(ctx, `CREATE TABLE checkpoints (thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL DEFAULT '',
				checkpoint_id TEXT NOT NULL, parent_checkpoint_id TEXT, type TEXT, checkpoint BLOB, metadata BLOB,
				PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id))`); err != nil {
				b.Fatal(err)
			}
			ins, err := conn.PrepareContext(ctx, `INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata) VALUES (?, '', ?, ?, 'json', ?, ?)`)
			if err != nil {
				b.Fatal(err)
			}
			defer ins.Close()
			begin, _ := conn.PrepareContext(ctx, "BEGIN")
			defer begin.Close()
			commit, _ := conn.PrepareContext(ctx, "COMMIT")
			defer commit.Close()
			payload := make([]byte, 596)
			rand.Read(payload)
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				var parent any
				if i%12 != 0 {
					parent = fmt.Sprintf("1f0%08x-0000-6000-8000-%012x", i-1, i-1)
				}
				if _, err := begin.ExecContext(ctx); err != nil {
					b.Fatal(err)
				}
				if _, err := ins.ExecContext(ctx, fmt.Sprintf("thread-%d", i/12), fmt.Sprintf("1f0%08x-0000-6000-8000-%012x", i, i), parent, payload, []byte("{}")); err != nil {
					b.Fatal(err)
				}
				if _, err := commit.ExecContext(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N), "us/txn")
		})
	}
}

type w1State struct {
	Count int
	Log   []string `lockstep:"append"`
}

func w1Graph(tb testing.TB, s checkpoint.Saver) *graph.Runnable[w1State] {
	g := graph.New[w1State]()
	for i := 1; i <= 10; i++ {
		g.AddNode(fmt.Sprintf("n%d", i), func(ctx context.Context, st w1State) (graph.Update[w1State], error) {
			return graph.Set(w1State{Count: st.Count + 1, Log: []string{"0123456789abcdef"}}, "Count", "Log"), nil
		})
	}
	g.AddEdge(graph.START, "n1")
	for i := 1; i < 10; i++ {
		g.AddEdge(fmt.Sprintf("n%d", i), fmt.Sprintf("n%d", i+1))
	}
	g.AddEdge("n10", graph.END)
	r, err := g.Compile(graph.WithSaver(s))
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// BenchmarkW1Linear runs LangGraph's W1 workload end to end (a 10-node
// chain, one invoke per thread) through the graph runtime on this saver
// and reports us/step (per node step), as the root benchmark does.
func BenchmarkW1Linear(b *testing.B) {
	for _, sync := range benchSyncs {
		b.Run("saver=sqlite-"+map[Synchronous]string{SyncNormal: "normal", SyncFull: "full"}[sync], func(b *testing.B) {
			s := openTemp(b, Config{Synchronous: sync})
			r := w1Graph(b, s)
			ctx := context.Background()
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				res, err := r.Invoke(ctx, "w1-"+strconv.Itoa(i), graph.Set(w1State{}, "Count"))
				if err != nil || res.Values.Count != 10 {
					b.Fatalf("run %d: %v %+v", i, err, res.Values)
				}
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N*10), "us/step")
		})
	}
}

// w2Thread writes a W2-shaped thread: steps appends of one 1 KiB item, the
// item also saved as the step's pending write.
func w2Thread(tb testing.TB, s *Saver, steps int) (head, prev string) {
	ids := checkpoint.NewIDGenerator(nil, nil)
	item := make([]byte, 1000)
	for i := range item {
		item[i] = 'x'
	}
	lease := checkpoint.Lease{Owner: "w2", TTL: time.Minute}
	for i := 0; i < steps; i++ {
		id := ids.Next(head)
		data := json.RawMessage(fmt.Sprintf(`["%04d%s"]`, i, item))
		req := checkpoint.PutRequest{Thread: "w2", Lease: lease, Checkpoint: checkpoint.Checkpoint{
			ID: id, ParentID: head,
			Metadata: checkpoint.Metadata{Source: checkpoint.SourceLoop, Step: i, Parents: map[string]string{}},
			Versions: map[string]string{"Messages": id, "branch:to:b": id},
			Channels: map[string][]checkpoint.Blob{
				"Messages":    {{Version: id, Append: true, Base: head, Data: data}},
				"branch:to:b": {{Version: id, Data: json.RawMessage(`null`)}},
			},
		}}
		if head != "" {
			req.ParentWrites = []checkpoint.TaskWrites{{TaskID: fmt.Sprintf("%036d", i), Node: "a", Path: "pull",
				Writes: []checkpoint.Write{{Channel: "Messages", Value: data}}}}
		}
		if err := s.Put(context.Background(), req); err != nil {
			tb.Fatal(err)
		}
		head, prev = id, head
	}
	return head, prev
}

// BenchmarkGetLatest reads the head of a 1000-step thread whose state is
// 1000 appended 1 KiB items: whole (us/get, O(state)), and with Have
// holding the previous version (what the runtime's state cache sends; one
// blob is read).
func BenchmarkGetLatest(b *testing.B) {
	s := openTemp(b, Config{Synchronous: SyncNormal})
	_, prev := w2Thread(b, s, 1000)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		have map[string]string
	}{{"whole", nil}, {"have=previous", map[string]string{"Messages": prev, "branch:to:b": prev}}} {
		b.Run(tc.name, func(b *testing.B) {
			start := time.Now()
			for i := 0; i < b.N; i++ {
				if _, err := s.Get(ctx, checkpoint.Ref{Thread: "w2"}, checkpoint.GetOptions{Have: tc.have}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N), "us/get")
		})
	}
}

// BenchmarkListHistory lists the full history (1000 tuples with channels
// and pending writes) of the W2 thread in ms/history.
func BenchmarkListHistory(b *testing.B) {
	s := openTemp(b, Config{Synchronous: SyncNormal})
	w2Thread(b, s, 1000)
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		tps, err := s.List(ctx, "w2", checkpoint.ListOptions{})
		if err != nil || len(tps) != 1000 {
			b.Fatal(err, len(tps))
		}
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(b.N), "ms/history")
}
