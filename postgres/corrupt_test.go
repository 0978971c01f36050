package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// seed writes a thread of two checkpoints with a pending write and an
// append chain, and returns its refs.
func seed(t *testing.T, s *Saver, thread string) (c1, c2 string) {
	t.Helper()
	ctx := context.Background()
	l := checkpoint.Lease{Owner: "run-1", TTL: time.Minute}
	c1, c2 = "01J00000000000000000000001", "01J00000000000000000000002"
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Put(ctx, checkpoint.PutRequest{Thread: thread, Lease: l, Checkpoint: checkpoint.Checkpoint{ID: c1,
		Metadata: checkpoint.Metadata{Source: checkpoint.SourceInput, Step: -1, Extra: map[string]any{"user": "ada"}},
		Versions: map[string]string{"x": c1, "log": c1},
		Channels: map[string][]checkpoint.Blob{"x": {{Version: c1, Data: json.RawMessage(`{"amount":5}`)}}, "log": {{Version: c1, Append: true, Data: json.RawMessage(`["a"]`)}}}}}))
	must(s.Put(ctx, checkpoint.PutRequest{Thread: thread, Lease: l, Checkpoint: checkpoint.Checkpoint{ID: c2, ParentID: c1,
		Metadata: checkpoint.Metadata{Source: checkpoint.SourceLoop, Step: 0},
		Versions: map[string]string{"x": c1, "log": c2},
		Channels: map[string][]checkpoint.Blob{"log": {{Version: c2, Base: c1, Append: true, Data: json.RawMessage(`["b"]`)}}}},
		ParentWrites: []checkpoint.TaskWrites{{TaskID: "task-1", Node: "n", Path: "pull", Writes: []checkpoint.Write{{Channel: "log", Value: json.RawMessage(`["b"]`)}}}}}))
	must(s.PutWrites(ctx, checkpoint.WritesRequest{Ref: checkpoint.Ref{Thread: thread, ID: c2}, Lease: l,
		Tasks: []checkpoint.TaskWrites{{TaskID: "task-2", Node: "n", Path: "pull", Writes: []checkpoint.Write{{Channel: "x", Value: json.RawMessage(`{"amount":7}`)}}}}}))
	return c1, c2
}

// TestHandEditedRowsAreCorrupt: a row changed by hand (its JSON edited in
// psql, or a row copied under another thread's key) is reported as a
// *checkpoint.CorruptError naming thread and checkpoint by every read,
// never decoded into another value. JSONB's own rewriting (key order,
// spacing) is not corruption: the checksum is over JSONB's text.
func TestHandEditedRowsAreCorrupt(t *testing.T) {
	db := openTest(t, Config{})
	s := db.Saver()
	ctx := context.Background()
	q := pgx.Identifier{db.Schema()}.Sanitize()
	cases := []struct {
		name string
		sql  string
	}{
		{"a blob's value", `UPDATE ` + q + `.blobs SET value = '{"amount": 500}' WHERE thread_id = $1 AND channel = 'x'`},
		{"an append's value", `UPDATE ` + q + `.blobs SET value = '["z"]' WHERE thread_id = $1 AND channel = 'log' AND base <> ''`},
		{"a pending write's value", `UPDATE ` + q + `.writes SET value = '{"amount": 700}' WHERE thread_id = $1 AND task_id = 'task-2'`},
		{"a pending write's channel", `UPDATE ` + q + `.writes SET channel = 'y' WHERE thread_id = $1 AND task_id = 'task-2'`},
		{"metadata", `UPDATE ` + q + `.checkpoints SET metadata = jsonb_set(metadata, '{user}', '"eve"') WHERE thread_id = $1`},
		{"versions", `UPDATE ` + q + `.checkpoints SET versions = '{"x": "01J00000000000000000000002", "log": "01J00000000000000000000002"}' WHERE thread_id = $1 AND checkpoint_id = '01J00000000000000000000002'`},
		{"a write copied from another thread", `UPDATE ` + q + `.writes w SET value = o.value, crc = o.crc FROM ` + q + `.writes o
			WHERE w.thread_id = $1 AND w.task_id = 'task-2' AND o.thread_id = 'other' AND o.task_id = 'task-2'`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			thread := "t-" + strings.ReplaceAll(tc.name, " ", "-")
			seed(t, s, thread)
			seed(t, s, "other")
			// Another value for the copy: the other thread's write says 9.
			if _, err := db.Pool().Exec(ctx, `UPDATE `+q+`.writes SET value = '{"amount": 9}', crc = `+q+`.crc(thread_id, checkpoint_ns, checkpoint_id, task_id, idx::text, channel, node, path, '{"amount": 9}'::jsonb::text)
				WHERE thread_id = 'other' AND task_id = 'task-2'`); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Pool().Exec(ctx, tc.sql, thread); err != nil {
				t.Fatal(err)
			}
			_, err := s.Get(ctx, checkpoint.Ref{Thread: thread}, checkpoint.GetOptions{})
			var ce *checkpoint.CorruptError
			if !errors.As(err, &ce) || ce.Thread != thread || ce.Checkpoint == "" {
				t.Errorf("Get: %v, want a *checkpoint.CorruptError naming the thread and checkpoint", err)
			}
			if _, err := s.List(ctx, thread, checkpoint.ListOptions{}); !errors.Is(err, checkpoint.ErrCorrupt) {
				t.Errorf("List: %v, want ErrCorrupt", err)
			}
			if _, err := db.Pool().Exec(ctx, `DELETE FROM `+q+`.writes WHERE thread_id = 'other'`); err != nil {
				t.Fatal(err)
			}
			if err := s.DeleteThread(ctx, "other"); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("JSONB's rewriting is not corruption", func(t *testing.T) {
		seed(t, s, "clean")
		tp, err := s.Get(ctx, checkpoint.Ref{Thread: "clean"}, checkpoint.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := string(tp.Checkpoint.Channels["x"][0].Data); got != `{"amount": 5}` {
			t.Errorf("x reads back as %s", got)
		}
	})
}
