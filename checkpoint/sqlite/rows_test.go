package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// fixWriteCRCs recomputes the checksum of every writes row of thread after
// a test tampered with them, as a tamperer who knows the format would:
// only the decoding can catch what it did.
func fixWriteCRCs(t *testing.T, db *sql.DB, thread string) {
	t.Helper()
	ctx := context.Background()
	rows, err := db.QueryContext(ctx, `SELECT rowid, checkpoint_ns, checkpoint_id, task_id, idx, channel, value, node, path FROM writes WHERE thread_id = ?`, thread)
	if err != nil {
		t.Fatal(err)
	}
	type fix struct{ rowid, crc int64 }
	var fixes []fix
	for rows.Next() {
		var rowid int64
		var r writeRow
		var ns string
		if err := rows.Scan(&rowid, &ns, &r.checkpoint, &r.task, &r.idx, &r.channel, &r.value, &r.node, &r.path); err != nil {
			t.Fatal(err)
		}
		fixes = append(fixes, fix{rowid, writeCRC(thread, ns, r.checkpoint, r.task, r.idx, r.channel, r.node, r.path, r.value)})
	}
	rows.Close()
	for _, f := range fixes {
		if _, err := db.ExecContext(ctx, `UPDATE writes SET crc = ? WHERE rowid = ?`, f.crc, f.rowid); err != nil {
			t.Fatal(err)
		}
	}
}

// waitingLine is a line of 4 checkpoints whose head holds the interrupt
// writes of two tasks (IDs i-a and i-b) and an answer of the first to
// another question: a thread waiting on two interrupts.
func waitingLine(t *testing.T, s *Saver, thread string) *line {
	t.Helper()
	l := putLine(t, s, thread, 4)
	err := s.PutWrites(t.Context(), checkpoint.WritesRequest{Ref: checkpoint.Ref{Thread: thread, ID: l.head}, Lease: checkpoint.Lease{Owner: l.owner},
		Tasks: []checkpoint.TaskWrites{
			{TaskID: "task-a", Node: "ask", Path: "pull", Writes: []checkpoint.Write{
				{Channel: checkpoint.ChannelInterrupt, Value: []byte(`[{"id":"i-a","value":"ship?"}]`)},
				{Channel: checkpoint.ChannelResume, Value: []byte(`{"i-0":"yes"}`)}}},
			{TaskID: "task-b", Node: "ask", Path: "push:0", Writes: []checkpoint.Write{
				{Channel: checkpoint.ChannelInterrupt, Value: []byte(`[{"id":"i-b","value":"pay?"}]`)}}},
		}})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// wantCorrupt fails unless err is a *checkpoint.CorruptError naming thread
// and checkpoint id (any checkpoint when id is "").
func wantCorrupt(t *testing.T, op string, err error, thread, id string) {
	t.Helper()
	var ce *checkpoint.CorruptError
	if !errors.Is(err, checkpoint.ErrCorrupt) || !errors.As(err, &ce) {
		t.Errorf("%s: %v, want a *checkpoint.CorruptError", op, err)
		return
	}
	if ce.Thread != thread || ce.Checkpoint == "" || id != "" && ce.Checkpoint != id {
		t.Errorf("%s: %+v, want thread %q checkpoint %q", op, ce, thread, id)
	}
}

// TestCorruptWriteRows (issue 16): writes rows are decoded as strictly as
// state and their checksum covers their key. A special write json.Marshal
// could not have written (null, a duplicate or case-variant key, an
// unknown key, a missing value, invalid UTF-8, a lone surrogate), one
// interrupt ID twice (in a write or across tasks), and a row saved under
// another index, under its checksum recomputed, and a row copied from
// another thread, checkpoint or task, under its own, are each a
// *checkpoint.CorruptError naming the thread and the checkpoint from Get,
// List and PendingInterrupts: before, the value was read leniently (the
// thread stopped waiting, or an answer was read under an ID nobody asked)
// and a copied row verified, so that the thread showed and accepted the
// other thread's interrupt. The rows are left as they are.
func TestCorruptWriteRows(t *testing.T) {
	const head = `(SELECT max(checkpoint_id) FROM checkpoints WHERE thread_id = 'bad')`
	const interruptA = `UPDATE writes SET value = ?1 WHERE thread_id = 'bad' AND task_id = 'task-a' AND channel = '__interrupt__'`
	const resumeA = `UPDATE writes SET value = ?1 WHERE thread_id = 'bad' AND task_id = 'task-a' AND channel = '__resume__'`
	for _, tc := range []struct {
		name  string
		sql   string
		arg   any
		fix   bool // recompute the checksums of the writes rows
		inbox bool // PendingInterrupts reads the row (an interrupt's task)
	}{
		{"interrupt null", interruptA, `null`, true, true},
		{"interrupt an object", interruptA, `{"id":"i-a","value":"ship?"}`, true, true},
		{"interrupt duplicate id key", interruptA, `[{"id":"i-a","id":"i-z","value":"ship?"}]`, true, true},
		{"interrupt case-variant id key", interruptA, `[{"ID":"i-z","id":"i-a","value":"ship?"}]`, true, true},
		{"interrupt unknown key", interruptA, `[{"id":"i-a","value":"ship?","answered":true}]`, true, true},
		{"interrupt without a value", interruptA, `[{"id":"i-a"}]`, true, true},
		{"interrupt empty ID", interruptA, `[{"id":"","value":"ship?"}]`, true, true},
		{"interrupt invalid UTF-8", interruptA, "[{\"id\":\"i-a\",\"value\":\"ship\xff\"}]", true, true},
		{"interrupt lone surrogate", interruptA, `[{"id":"i-a","value":"ship\ud800"}]`, true, true},
		{"two interrupts with one ID", interruptA, `[{"id":"i-a","value":1},{"id":"i-a","value":2}]`, true, true},
		{"one interrupt ID in two tasks", interruptA, `[{"id":"i-b","value":"ship?"}]`, true, true},
		{"resume null", resumeA, `null`, true, true},
		{"resume an array", resumeA, `["yes"]`, true, true},
		{"resume duplicate key", resumeA, `{"i-a":"no","i-a":"yes"}`, true, true},
		{"resume escaped duplicate key", resumeA, `{"i-a":"no","i-\u0061":"yes"}`, true, true},
		{"error null", `UPDATE writes SET channel = '__error__', idx = -1, value = 'null' WHERE thread_id = 'bad' AND task_id = 'task-a' AND channel = '__resume__'`, nil, true, true},
		{"interrupt under another index", `UPDATE writes SET idx = 0 WHERE thread_id = 'bad' AND task_id = 'task-a' AND channel = '__interrupt__'`, nil, true, true},
		{"regular write under a negative index", `UPDATE writes SET channel = 'Log', value = '["x"]' WHERE thread_id = 'bad' AND task_id = 'task-a' AND channel = '__resume__'`, nil, true, true},
		// Copies keep the checksum they had: it no longer matches.
		{"row copied from another thread", `DELETE FROM writes WHERE thread_id = 'bad' AND task_id = 'task-b';
			INSERT INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, value, node, path, created_at, crc)
			SELECT 'bad', checkpoint_ns, ` + head + `, task_id, idx, channel, value, node, path, created_at, crc FROM writes WHERE thread_id = 'good' AND task_id = 'task-b'`, nil, false, true},
		{"row moved to another task", `UPDATE writes SET task_id = 'task-c' WHERE thread_id = 'bad' AND task_id = 'task-b'`, nil, false, true},
		{"row moved to another index", `UPDATE writes SET idx = 7 WHERE thread_id = 'bad' AND task_id = 'task-a' AND channel = '__resume__'`, nil, false, true},
		{"row moved from an older checkpoint", `UPDATE writes SET checkpoint_id = ` + head + ` WHERE thread_id = 'bad' AND task_id = 'task-old'`, nil, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openTemp(t, Config{Synchronous: SyncNormal})
			ctx := t.Context()
			good := waitingLine(t, s, "good")
			bad := putLine(t, s, "bad", 3)
			// a write of an older checkpoint, for the move case
			if err := s.PutWrites(ctx, checkpoint.WritesRequest{Ref: checkpoint.Ref{Thread: "bad", ID: bad.head}, Lease: checkpoint.Lease{Owner: bad.owner},
				Tasks: []checkpoint.TaskWrites{{TaskID: "task-old", Node: "ask", Writes: []checkpoint.Write{{Channel: checkpoint.ChannelInterrupt, Value: []byte(`[{"id":"i-old","value":1}]`)}}}}}); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				req := bad.next()
				if err := s.Put(ctx, req); err != nil {
					t.Fatal(err)
				}
				bad.committed(req)
			}
			if err := s.PutWrites(ctx, checkpoint.WritesRequest{Ref: checkpoint.Ref{Thread: "bad", ID: bad.head}, Lease: checkpoint.Lease{Owner: bad.owner},
				Tasks: []checkpoint.TaskWrites{
					{TaskID: "task-a", Node: "ask", Path: "pull", Writes: []checkpoint.Write{
						{Channel: checkpoint.ChannelInterrupt, Value: []byte(`[{"id":"i-a","value":"ship?"}]`)},
						{Channel: checkpoint.ChannelResume, Value: []byte(`{"i-0":"yes"}`)}}},
					{TaskID: "task-b", Node: "ask", Path: "push:0", Writes: []checkpoint.Write{
						{Channel: checkpoint.ChannelInterrupt, Value: []byte(`[{"id":"i-b","value":"pay?"}]`)}}},
				}}); err != nil {
				t.Fatal(err)
			}
			before, _, err := s.PendingInterrupts(ctx, checkpoint.InterruptQuery{})
			if err != nil || len(before) != 4 {
				t.Fatalf("pending interrupts before: %v, %v", before, err)
			}
			args := []any{}
			if tc.arg != nil {
				args = append(args, tc.arg)
			}
			res, err := s.DB().ExecContext(ctx, tc.sql, args...)
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := res.RowsAffected(); n < 1 {
				t.Fatalf("corruption touched %d rows", n)
			}
			if tc.fix {
				fixWriteCRCs(t, s.DB(), "bad")
			}
			for range 2 { // the rows are left as they are: reading again fails again
				tp, err := s.Get(ctx, checkpoint.Ref{Thread: "bad"}, checkpoint.GetOptions{})
				if err == nil {
					t.Logf("Get read %d pending writes", len(tp.Pending))
				}
				wantCorrupt(t, "Get", err, "bad", bad.head)
				_, err = s.List(ctx, "bad", checkpoint.ListOptions{})
				wantCorrupt(t, "List", err, "bad", bad.head)
				if tc.inbox {
					pis, _, err := s.PendingInterrupts(ctx, checkpoint.InterruptQuery{})
					if err == nil {
						t.Logf("PendingInterrupts listed %+v", pis)
					}
					wantCorrupt(t, "PendingInterrupts", err, "bad", bad.head)
				}
			}
			// The other thread still reads.
			if tp, err := s.Get(ctx, checkpoint.Ref{Thread: "good"}, checkpoint.GetOptions{}); err != nil || tp.Checkpoint.ID != good.head {
				t.Errorf("good thread: %v", err)
			}
		})
	}
}

// TestCorruptCheckpointRows (issue 16): a checkpoint row whose checksum
// was recomputed after an edit that only corruption makes is a
// *checkpoint.CorruptError naming the thread and the checkpoint, from Get
// (also of an older checkpoint, and from a reader holding state) and
// List, instead of being read as valid (a step the next step overflows,
// a next task naming no node: the waiting interrupt would detach): a
// step that is negative, MaxInt64, or does not increase from the
// parent's; columns that disagree with the metadata; a head whose ID
// sorts before its parent's; a branch naming no node; a version newer
// than the checkpoint; metadata with a duplicate key, a lone surrogate, a
// null or missing fixed key, a float step. A row copied to another thread
// or ID does not verify.
func TestCorruptCheckpointRows(t *testing.T) {
	const head = `(SELECT max(checkpoint_id) FROM checkpoints WHERE thread_id = 'bad')`
	step := func(to string) string {
		return `UPDATE checkpoints SET step = ` + to + `, metadata = replace(metadata, '"step":3', '"step":' || ` + to + `) WHERE thread_id = 'bad' AND checkpoint_id = ` + head
	}
	meta := func(m string) string {
		return `UPDATE checkpoints SET metadata = '` + m + `' WHERE thread_id = 'bad' AND checkpoint_id = ` + head
	}
	for _, tc := range []struct {
		name string
		sql  string
		fix  string // the row whose checksum to recompute: "head", "copy" or ""
	}{
		{"step negative", step("-5"), "head"},
		{"step MaxInt64", step("9223372036854775807"), "head"},
		{"step beyond 2^53", step("9007199254740993"), "head"},
		{"step equal to the parent's", step("2"), "head"},
		{"step before the parent's", step("0"), "head"},
		{"step column not the metadata's", `UPDATE checkpoints SET step = 4 WHERE thread_id = 'bad' AND checkpoint_id = ` + head, "head"},
		{"source column not the metadata's", `UPDATE checkpoints SET source = 'input' WHERE thread_id = 'bad' AND checkpoint_id = ` + head, "head"},
		{"head sorts before its parent", `UPDATE checkpoints SET parent_checkpoint_id = ` + head + ` || 'z' WHERE thread_id = 'bad' AND checkpoint_id = ` + head, "head"},
		{"branch naming no node", `UPDATE checkpoints SET versions = json_set(versions, '$."branch:to:"', checkpoint_id),
			channels = json_set(channels, '$."branch:to:"', json('{"value":null}')) WHERE thread_id = 'bad' AND checkpoint_id = ` + head, "head"},
		{"join naming no node", `UPDATE checkpoints SET versions = json_set(versions, '$."join:a+b:"', checkpoint_id),
			channels = json_set(channels, '$."join:a+b:"', json('{"value":["a"]}')) WHERE thread_id = 'bad' AND checkpoint_id = ` + head, "head"},
		{"version after the checkpoint", `UPDATE checkpoints SET versions = json_set(versions, '$.Old', checkpoint_id || 'z') WHERE thread_id = 'bad' AND checkpoint_id = ` + head, "head"},
		{"mark after the checkpoint", `UPDATE checkpoints SET mark = checkpoint_id || 'z' WHERE thread_id = 'bad' AND checkpoint_id = ` + head, "head"},
		{"channel name not UTF-8", `UPDATE checkpoints SET versions = '{"Log":"' || checkpoint_id || '","N":"' || checkpoint_id || '","` + "x\xff" + `":"' || checkpoint_id || '"}' WHERE thread_id = 'bad' AND checkpoint_id = ` + head, "head"},
		{"channel name lone surrogate", `UPDATE checkpoints SET versions = '{"Log":"' || checkpoint_id || '","N":"' || checkpoint_id || '","x\ud800":"' || checkpoint_id || '"}' WHERE thread_id = 'bad' AND checkpoint_id = ` + head, "head"},
		{"metadata duplicate key", meta(`{"parents":{},"source":"loop","step":3,"step":3}`), "head"},
		{"metadata lone surrogate", meta(`{"parents":{},"run_id":"r\ud800","source":"loop","step":3}`), "head"},
		{"metadata null parents", meta(`{"parents":null,"source":"loop","step":3}`), "head"},
		{"metadata null parent", meta(`{"parents":{"":null},"source":"loop","step":3}`), "head"},
		{"metadata without step", meta(`{"parents":{},"source":"loop"}`), "head"},
		{"metadata float step", meta(`{"parents":{},"source":"loop","step":3.0}`), "head"},
		{"metadata caller value lone surrogate", meta(`{"kind":"\udc00","parents":{},"source":"loop","step":3}`), "head"},
		// A copy keeps the checksum it had: it no longer matches.
		{"row copied to another thread", `UPDATE checkpoints SET thread_id = 'bad' WHERE thread_id = 'good' AND checkpoint_id = (SELECT max(checkpoint_id) FROM checkpoints WHERE thread_id = 'good')`, ""},
		{"row copied to another ID", `INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, step, source, created_at, metadata, versions, channels, task_writes, mark, pruned, crc)
			SELECT thread_id, checkpoint_ns, checkpoint_id || 'z', parent_checkpoint_id, step, source, created_at, metadata, versions, channels, task_writes, mark, pruned, crc FROM checkpoints WHERE thread_id = 'bad' AND checkpoint_id = ` + head, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openTemp(t, Config{Synchronous: SyncNormal})
			ctx := t.Context()
			bad := putLine(t, s, "bad", 4)
			good := putLine(t, s, "good", 5) // its IDs sort after bad's
			res, err := s.DB().ExecContext(ctx, tc.sql)
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				t.Fatalf("corruption touched %d rows, want 1", n)
			}
			var headID string
			if err := s.DB().QueryRowContext(ctx, `SELECT max(checkpoint_id) FROM checkpoints WHERE thread_id = 'bad'`).Scan(&headID); err != nil {
				t.Fatal(err)
			}
			ref := checkpoint.Ref{Thread: "bad"}
			if tc.name == "row copied to another thread" {
				headID, ref.ID = good.head, good.head // the row read, whether it is the head or not
			}
			if tc.fix == "head" {
				fixCRC(t, s.DB(), "bad", headID)
			}
			for range 2 {
				tp, err := s.Get(ctx, ref, checkpoint.GetOptions{})
				if err == nil {
					t.Logf("Get read step %d next %v", tp.Checkpoint.Metadata.Step, tp.Checkpoint.Versions)
				}
				wantCorrupt(t, "Get", err, "bad", headID)
				_, err = s.Get(ctx, ref, checkpoint.GetOptions{Have: map[string]string{"Log": bad.head, "N": bad.head}})
				wantCorrupt(t, "Get with Have", err, "bad", headID)
				_, err = s.List(ctx, "bad", checkpoint.ListOptions{})
				wantCorrupt(t, "List", err, "bad", headID)
				_, err = s.List(ctx, "bad", checkpoint.ListOptions{MetadataOnly: true})
				if !strings.Contains(tc.name, "UTF-8") && !strings.Contains(tc.name, "surrogate") || strings.Contains(tc.name, "metadata") {
					wantCorrupt(t, "List metadata only", err, "bad", headID)
				}
			}
			if _, err := s.Get(ctx, checkpoint.Ref{Thread: "good", ID: good.head}, checkpoint.GetOptions{}); err != nil && tc.name != "row copied to another thread" {
				t.Errorf("good thread: %v", err)
			}
		})
	}
}

// TestPutRefusesWhatReadsReportCorrupt (issue 16): what a read reports as
// corrupt, Put and PutWrites refuse with ErrInvalid before writing, on
// both savers (the conformance suite has the cases; here the step rule on
// the fast path, whose one INSERT checks the parent's step, and the
// interrupt IDs already on the checkpoint).
func TestPutRefusesWhatReadsReportCorrupt(t *testing.T) {
	ctx := t.Context()
	for _, s := range []checkpoint.Saver{checkpoint.NewMemorySaver(nil), openTemp(t, Config{Synchronous: SyncNormal})} {
		name := fmt.Sprintf("%T", s)
		l := putLine(t, s, "t", 3)
		req := l.next()
		req.Checkpoint.Metadata.Step = l.step - 1 // the parent's
		if err := s.Put(ctx, req); !errors.Is(err, checkpoint.ErrInvalid) {
			t.Errorf("%s: Put with the parent's step: %v, want ErrInvalid", name, err)
		}
		req.Checkpoint.Metadata.Step = l.step
		if err := s.Put(ctx, req); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		l.committed(req)
		w := func(task, id string) checkpoint.WritesRequest {
			return checkpoint.WritesRequest{Ref: checkpoint.Ref{Thread: "t", ID: l.head}, Lease: checkpoint.Lease{Owner: l.owner},
				Tasks: []checkpoint.TaskWrites{{TaskID: task, Writes: []checkpoint.Write{{Channel: checkpoint.ChannelInterrupt, Value: []byte(`[{"id":"` + id + `","value":1}]`)}}}}}
		}
		if err := s.PutWrites(ctx, w("a", "x")); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := s.PutWrites(ctx, w("a", "x")); err != nil {
			t.Errorf("%s: the same task saving its interrupt again: %v", name, err)
		}
		if err := s.PutWrites(ctx, w("b", "x")); !errors.Is(err, checkpoint.ErrInvalid) {
			t.Errorf("%s: another task raising x: %v, want ErrInvalid", name, err)
		}
		tp, err := s.Get(ctx, checkpoint.Ref{Thread: "t"}, checkpoint.GetOptions{})
		if err != nil || len(tp.Pending) != 1 {
			t.Errorf("%s: after the refusals: %v, %v", name, tp, err)
		}
	}
}

// TestMigrateWritesChecksums (issue 16): a file written by the schema-2
// code (testdata/schema2.sqlite: threads "wait" and "other", each waiting
// on an interrupt with an answer and a finished task's write) is refused
// by OpenExisting (ErrSchemaTooOld, file unchanged) and migrated by Open
// to schema 4 in one transaction: every writes row gets a checksum bound
// to its key, reads go on as before, a row whose schema-2 checksum did
// not match is still reported corrupt, and from then on a row copied
// between threads does not verify (under schema 2 the two threads'
// finished writes had the same checksum).
func TestMigrateWritesChecksums(t *testing.T) {
	ctx := t.Context()
	b, err := os.ReadFile(filepath.Join("testdata", "schema2.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "schema2.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	// A row corrupted under schema 2: its old checksum fails.
	raw, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	var same int
	if err := raw.QueryRowContext(ctx, `SELECT count(DISTINCT crc) FROM writes WHERE task_id = 'task-b'`).Scan(&same); err != nil || same != 1 {
		t.Fatalf("schema 2: the two threads' equal writes have %d checksums (%v), want 1", same, err)
	}
	if _, err := raw.ExecContext(ctx, `UPDATE writes SET crc = crc + 1 WHERE thread_id = 'other' AND task_id = 'task-a' AND channel = '__resume__'`); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenExisting(path, Config{}); !errors.Is(err, ErrSchemaTooOld) {
		t.Fatalf("OpenExisting of a schema-2 file: %v, want ErrSchemaTooOld", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("OpenExisting changed the schema-2 file")
	}
	s := openAt(t, path, Config{Synchronous: SyncNormal})
	var v int
	if err := s.DB().QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil || v != schemaVersion {
		t.Fatalf("user_version %d, %v; want %d", v, err, schemaVersion)
	}
	tp, err := s.Get(ctx, checkpoint.Ref{Thread: "wait"}, checkpoint.GetOptions{})
	if err != nil || len(tp.Pending) != 3 {
		t.Fatalf("wait after the migration: %v, %v", tp, err)
	}
	pis, err := checkpoint.PendingInterrupts(tp.Thread, tp.Checkpoint.ID, tp.Pending)
	if err != nil || len(pis) != 1 || pis[0].InterruptID != "wait-a" {
		t.Fatalf("wait's pending interrupts: %+v, %v", pis, err)
	}
	_, err = s.Get(ctx, checkpoint.Ref{Thread: "other"}, checkpoint.GetOptions{})
	wantCorrupt(t, "Get of the row corrupt before the migration", err, "other", "")
	if err := s.DB().QueryRowContext(ctx, `SELECT count(DISTINCT crc) FROM writes WHERE task_id = 'task-b'`).Scan(&same); err != nil || same != 2 {
		t.Fatalf("schema 4: the two threads' equal writes have %d checksums (%v), want 2", same, err)
	}
	// A copy no longer verifies.
	if _, err := s.DB().ExecContext(ctx, `DELETE FROM writes WHERE thread_id = 'wait' AND task_id = 'task-a';
		INSERT INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, value, node, path, created_at, crc)
		SELECT 'wait', checkpoint_ns, (SELECT max(checkpoint_id) FROM checkpoints WHERE thread_id = 'wait'), task_id, idx, channel, value, node, path, created_at, crc
		FROM writes WHERE thread_id = 'other' AND task_id = 'task-a' AND channel = '__interrupt__'`); err != nil {
		t.Fatal(err)
	}
	_, err = s.Get(ctx, checkpoint.Ref{Thread: "wait"}, checkpoint.GetOptions{})
	wantCorrupt(t, "Get after copying other's interrupt into wait", err, "wait", tp.Checkpoint.ID)
}
