package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// fixCRC recomputes the checksum of a checkpoint row after a test tampered
// with it, as a tamperer who knows the format would: only the decoding
// can catch what it did.
func fixCRC(t *testing.T, db *sql.DB, thread, id string) {
	t.Helper()
	ctx := context.Background()
	rows, err := db.QueryContext(ctx, `SELECT `+cpColumns+` FROM checkpoints WHERE thread_id = ? AND checkpoint_id = ?`, thread, id)
	if err != nil {
		t.Fatal(err)
	}
	if !rows.Next() {
		t.Fatalf("no row %s", id)
	}
	r, err := scanRow(rows)
	rows.Close()
	if err != nil {
		t.Fatal(err)
	}
	crc := rowCRC(thread, r.ns, r.id, r.parent, r.step, r.source, r.created, r.metadata, r.versions, r.channels, r.taskWrite, r.mark, r.pruned)
	if _, err := db.ExecContext(ctx, `UPDATE checkpoints SET crc = ? WHERE thread_id = ? AND checkpoint_id = ?`, crc, thread, id); err != nil {
		t.Fatal(err)
	}
}

// TestCorruptRows (R12, R21): bytes flipped inside a stored value (still
// valid JSON, caught by the CRC-32C), truncated JSON, non-JSON text under
// a fixed checksum, a BLOB in a TEXT column, a broken chain link and a
// checksum that no longer matches all give a *checkpoint.CorruptError
// naming the thread and the checkpoint, from Get (with and without Have)
// and List, never a zero value or a silent fresh start; the row is left
// alone and other threads still load.
func TestCorruptRows(t *testing.T) {
	const oldest = `(SELECT min(checkpoint_id) FROM checkpoints WHERE thread_id = 'bad')`
	for _, tc := range []struct {
		name   string
		sql    string // applied to thread "bad"; ?1 = the head checkpoint ID
		fix    string // recompute the checksum of this row: "head" or "oldest"
		get    string // the checkpoint Get must fail on: "head" or "parent" (of the head)
		what   string // CorruptError.What prefix
		cpWant string // CorruptError.Checkpoint: "head", "oldest" or "parent"
	}{
		{"value flipped inside valid JSON", `UPDATE checkpoints SET channels = replace(channels, 'item 4', 'item 5') WHERE thread_id = 'bad' AND checkpoint_id = ?1`, "", "head", "checkpoint", "head"},
		{"channels truncated", `UPDATE checkpoints SET channels = substr(channels, 1, length(channels) - 2) WHERE thread_id = 'bad' AND checkpoint_id = ?1`, "", "head", "checkpoint", "head"},
		{"channels not JSON, checksum fixed", `UPDATE checkpoints SET channels = '{"Log":{"append":["item 0"],"base":""}' WHERE thread_id = 'bad' AND checkpoint_id = ?1`, "head", "head", "channels", "head"},
		{"channel entry malformed, checksum fixed", `UPDATE checkpoints SET channels = '{"Log":{"apend":["item 0"],"base":""},"N":{"value":4}}' WHERE thread_id = 'bad' AND checkpoint_id = ?1`, "head", "head", "channels", "head"},
		{"older row not JSON, checksum fixed", `UPDATE checkpoints SET channels = 'not json' WHERE thread_id = 'bad' AND checkpoint_id = ` + oldest, "oldest", "head", "channels", "oldest"},
		{"channels stored as BLOB", `UPDATE checkpoints SET channels = CAST(channels AS BLOB) || x'00ff' WHERE thread_id = 'bad' AND checkpoint_id = ?1`, "", "head", "checkpoint", "head"},
		{"older row of the chain", `UPDATE checkpoints SET channels = replace(channels, 'item 0', 'item 9') WHERE thread_id = 'bad' AND checkpoint_id = ` + oldest, "", "head", "checkpoint", "oldest"},
		{"chain link missing", `DELETE FROM checkpoints WHERE thread_id = 'bad' AND checkpoint_id = ` + oldest, "", "head", "channel Log", "head"},
		{"checkpoint metadata flipped", `UPDATE checkpoints SET metadata = replace(metadata, '"step":4', '"step":5') WHERE thread_id = 'bad' AND checkpoint_id = ?1`, "", "head", "checkpoint", "head"},
		{"checkpoint versions truncated", `UPDATE checkpoints SET versions = substr(versions, 1, 10) WHERE thread_id = 'bad' AND checkpoint_id = ?1`, "", "head", "checkpoint", "head"},
		{"checkpoint versions not JSON, checksum fixed", `UPDATE checkpoints SET versions = substr(versions, 1, 10) WHERE thread_id = 'bad' AND checkpoint_id = ?1`, "head", "head", "checkpoint", "head"},
		{"checkpoint crc", `UPDATE checkpoints SET crc = crc + 1 WHERE thread_id = 'bad' AND checkpoint_id = ?1`, "", "head", "checkpoint", "head"},
		{"checkpoint key moved", `UPDATE checkpoints SET parent_checkpoint_id = NULL WHERE thread_id = 'bad' AND checkpoint_id = ?1`, "", "head", "checkpoint", "head"},
		{"task writes flipped", `UPDATE checkpoints SET task_writes = replace(task_writes, '"pull"', '"push"') WHERE thread_id = 'bad' AND checkpoint_id = ?1`, "", "parent", "checkpoint", "head"},
		{"task writes not JSON, checksum fixed", `UPDATE checkpoints SET task_writes = '[{"task_id":' WHERE thread_id = 'bad' AND checkpoint_id = ?1`, "head", "parent", "task writes", "head"},
		{"pending write flipped", `UPDATE writes SET value = '"other"' WHERE thread_id = 'bad' AND checkpoint_id = ?1`, "", "head", "pending write", "head"},
		{"pending write not JSON", `UPDATE writes SET value = '{"a":' WHERE thread_id = 'bad' AND checkpoint_id = ?1`, "", "head", "pending write", "head"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openTemp(t, Config{Synchronous: SyncNormal})
			ctx := t.Context()
			putLine(t, s, "good", 6)
			bad := putLine(t, s, "bad", 5)
			// a pending write on the head, for the write cases
			if err := s.PutWrites(ctx, checkpoint.WritesRequest{Ref: checkpoint.Ref{Thread: "bad", ID: bad.head}, Lease: checkpoint.Lease{Owner: bad.owner},
				Tasks: []checkpoint.TaskWrites{{TaskID: "t", Writes: []checkpoint.Write{{Channel: "x", Value: []byte(`"v"`)}}}}}); err != nil {
				t.Fatal(err)
			}
			ids := listIDs(t, s, "bad") // newest first
			named := map[string]string{"head": ids[0], "parent": ids[1], "oldest": ids[len(ids)-1]}
			res, err := s.DB().ExecContext(ctx, tc.sql, bad.head)
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				t.Fatalf("corruption touched %d rows, want 1", n)
			}
			if tc.fix != "" {
				fixCRC(t, s.DB(), "bad", named[tc.fix])
			}
			check := func(op string, err error) {
				t.Helper()
				var ce *checkpoint.CorruptError
				if !errors.Is(err, checkpoint.ErrCorrupt) || !errors.As(err, &ce) {
					t.Fatalf("%s: %v, want a *checkpoint.CorruptError", op, err)
				}
				if ce.Thread != "bad" || ce.Checkpoint != named[tc.cpWant] || len(ce.What) < len(tc.what) || ce.What[:len(tc.what)] != tc.what {
					t.Errorf("%s: %+v, want thread bad, checkpoint %s (%s) and What %q...", op, ce, tc.cpWant, named[tc.cpWant], tc.what)
				}
			}
			ref := checkpoint.Ref{Thread: "bad"}
			if tc.get == "parent" {
				ref.ID = named["parent"]
			}
			_, err = s.Get(ctx, ref, checkpoint.GetOptions{})
			check("Get", err)
			_, err = s.List(ctx, "bad", checkpoint.ListOptions{})
			check("List", err)
			// The corrupt row is left as it is: reading again fails again,
			// also on the one-statement path of a reader holding state.
			_, err = s.Get(ctx, ref, checkpoint.GetOptions{})
			check("Get again", err)
			if tc.cpWant == "head" && tc.get == "head" && tc.what != "channel Log" {
				_, err = s.Get(ctx, ref, checkpoint.GetOptions{Have: map[string]string{"Log": named["parent"], "N": named["parent"]}})
				check("Get with Have", err)
			}
			// Other threads are not affected.
			tp, err := s.Get(ctx, checkpoint.Ref{Thread: "good"}, checkpoint.GetOptions{})
			if err != nil || len(tp.Checkpoint.Channels["Log"]) != 6 {
				t.Fatalf("good thread: %v", err)
			}
			if _, err := s.List(ctx, "good", checkpoint.ListOptions{}); err != nil {
				t.Fatalf("good thread list: %v", err)
			}
		})
	}
}
