package sqlite

import (
	"errors"
	"strconv"
	"testing"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// TestCorruptRows (R12, R21): bytes flipped inside a stored value (still
// valid JSON, caught by the CRC-32C), truncated JSON, non-JSON text, a
// BLOB in a TEXT column, a broken chain link and a checksum that no longer
// matches all give a *checkpoint.CorruptError naming the thread and the
// checkpoint, from Get and List, never a zero value or a silent fresh
// start; the row is left alone and other threads still load.
func TestCorruptRows(t *testing.T) {
	for _, tc := range []struct {
		name string
		sql  string // applied to thread "bad"; ?1 = the head checkpoint ID
		what string // CorruptError.What prefix
	}{
		{"blob flip inside valid JSON", `UPDATE blobs SET value = replace(value, 'item 4', 'item 5') WHERE thread_id = 'bad' AND version = ?1 AND channel = 'Log'`, "channel Log"},
		{"blob truncated", `UPDATE blobs SET value = substr(value, 1, length(value) - 2) WHERE thread_id = 'bad' AND version = ?1 AND channel = 'Log'`, "channel Log"},
		{"blob not JSON, checksum fixed", `UPDATE blobs SET value = 'not json', crc = ` + strconv.FormatInt(blobCRC("append", "", []byte("not json")), 10) + ` WHERE thread_id = 'bad' AND channel = 'Log' AND version = (SELECT min(version) FROM blobs WHERE thread_id = 'bad')`, "channel Log"},
		{"blob stored as BLOB", `UPDATE blobs SET value = CAST(value AS BLOB) || x'00ff' WHERE thread_id = 'bad' AND version = ?1 AND channel = 'N'`, "channel N"},
		{"older blob of the chain", `UPDATE blobs SET value = '["item 9"]' WHERE thread_id = 'bad' AND channel = 'Log' AND version = (SELECT min(version) FROM blobs WHERE thread_id = 'bad')`, "channel Log"},
		{"chain link missing", `DELETE FROM blobs WHERE thread_id = 'bad' AND channel = 'Log' AND version = (SELECT min(version) FROM blobs WHERE thread_id = 'bad')`, "channel Log"},
		{"checkpoint metadata flipped", `UPDATE checkpoints SET metadata = replace(metadata, '"step":4', '"step":5') WHERE thread_id = 'bad' AND checkpoint_id = ?1`, "checkpoint"},
		{"checkpoint versions truncated", `UPDATE checkpoints SET versions = substr(versions, 1, 10) WHERE thread_id = 'bad' AND checkpoint_id = ?1`, "checkpoint"},
		{"checkpoint crc", `UPDATE checkpoints SET crc = crc + 1 WHERE thread_id = 'bad' AND checkpoint_id = ?1`, "checkpoint"},
		{"pending write flipped", `UPDATE writes SET value = '"other"' WHERE thread_id = 'bad' AND checkpoint_id = ?1`, "pending write"},
		{"pending write not JSON", `UPDATE writes SET value = '{"a":' WHERE thread_id = 'bad' AND checkpoint_id = ?1`, "pending write"},
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
			res, err := s.DB().ExecContext(ctx, tc.sql, bad.head)
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				t.Fatalf("corruption touched %d rows, want 1", n)
			}
			check := func(op string, err error) {
				t.Helper()
				var ce *checkpoint.CorruptError
				if !errors.Is(err, checkpoint.ErrCorrupt) || !errors.As(err, &ce) {
					t.Fatalf("%s: %v, want a *checkpoint.CorruptError", op, err)
				}
				if ce.Thread != "bad" || ce.Checkpoint == "" || len(ce.What) < len(tc.what) || ce.What[:len(tc.what)] != tc.what {
					t.Errorf("%s: %+v, want thread bad, a checkpoint and What %q...", op, ce, tc.what)
				}
			}
			_, err = s.Get(ctx, checkpoint.Ref{Thread: "bad"}, checkpoint.GetOptions{})
			check("Get head", err)
			_, err = s.List(ctx, "bad", checkpoint.ListOptions{})
			check("List", err)
			// The corrupt row is left as it is: reading again fails again.
			_, err = s.Get(ctx, checkpoint.Ref{Thread: "bad"}, checkpoint.GetOptions{})
			check("Get head again", err)
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
