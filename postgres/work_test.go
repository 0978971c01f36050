package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// TestClaimDueSkipsLockedRows (D18): a thread whose row another
// transaction holds locked (another worker in the middle of claiming or
// settling it) is skipped by ClaimDue, which claims the others at once
// instead of waiting for the lock; once the lock goes, the skipped thread
// is claimed.
func TestClaimDueSkipsLockedRows(t *testing.T) {
	db := openTest(t, Config{})
	s := db.Saver()
	ctx := t.Context()
	for _, th := range []string{"thread-a", "thread-b", "thread-c"} {
		if _, _, err := s.Enqueue(ctx, checkpoint.QueuedInput{Thread: th, Key: "k", Input: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := pgx.Connect(ctx, testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // released below
	if _, err := tx.Exec(ctx, sqlFor(db.Schema(), `SELECT 1 FROM $S.threads WHERE thread_id = 'thread-b' FOR UPDATE`)); err != nil {
		t.Fatal(err)
	}
	// A claim that waited for the lock would end with this context (the
	// lock is held until the claim returns).
	claimCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	q := checkpoint.DueQuery{Owners: []string{"w-1", "w-2", "w-3"}, Runner: "pool", TTL: time.Minute}
	b, err := s.ClaimDue(claimCtx, q)
	if err != nil {
		t.Fatalf("ClaimDue while another transaction locks thread-b: %v (a claim must skip locked rows, not wait)", err)
	}
	var got []string
	for _, d := range b.Threads {
		got = append(got, d.Thread)
	}
	if diff := cmp.Diff([]string{"thread-a", "thread-c"}, got); diff != "" {
		t.Errorf("claimed with thread-b locked (-want +got):\n%s", diff)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	b, err = s.ClaimDue(ctx, checkpoint.DueQuery{Owners: []string{"x-1", "x-2"}, Runner: "pool", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Threads) != 1 || b.Threads[0].Thread != "thread-b" || b.Threads[0].Owner != "x-1" {
		t.Errorf("claimed after the lock went: %+v, want thread-b under x-1", b.Threads)
	}
}

// TestQueuedInputEdited: a queued input whose row was changed by hand in
// psql (its text, or copied to another thread) reads as a
// *checkpoint.CorruptError naming the thread, from Queued and from an
// Enqueue of its key, never as another input.
func TestQueuedInputEdited(t *testing.T) {
	cases := []struct {
		name, sql, thread string
	}{
		{"its input", `UPDATE $S.queued_inputs SET input_text = '{"n":2}' WHERE thread_id = 'thread-1'`, "thread-1"},
		{"its key", `UPDATE $S.queued_inputs SET run_key = 'other' WHERE thread_id = 'thread-1'`, "thread-1"},
		{"its time", `UPDATE $S.queued_inputs SET created_at = '2030-01-01T00:00:00.000000000Z' WHERE thread_id = 'thread-1'`, "thread-1"},
		{"copied to another thread", `INSERT INTO $S.queued_inputs (thread_id, run_key, input_text, created_at, crc)
			SELECT 'thread-2', run_key, input_text, created_at, crc FROM $S.queued_inputs WHERE thread_id = 'thread-1'`, "thread-2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			db := openTest(t, Config{})
			s := db.Saver()
			ctx := t.Context()
			if _, _, err := s.Enqueue(ctx, checkpoint.QueuedInput{Thread: "thread-1", Key: "k1", Input: json.RawMessage(`{"n":1}`)}); err != nil {
				t.Fatal(err)
			}
			execSQL(t, testURL(t), sqlFor(db.Schema(), c.sql))
			var ce *checkpoint.CorruptError
			if _, err := s.Queued(ctx, c.thread, 0); !errors.As(err, &ce) || ce.Thread != c.thread {
				t.Errorf("Queued(%s) = %v, want a *checkpoint.CorruptError naming the thread", c.thread, err)
			}
			key := "k1"
			if c.name == "its key" {
				key = "other"
			}
			if _, _, err := s.Enqueue(ctx, checkpoint.QueuedInput{Thread: c.thread, Key: key, Input: json.RawMessage(`{"n":3}`)}); !errors.As(err, &ce) {
				t.Errorf("Enqueue of the edited input's key = %v, want a *checkpoint.CorruptError", err)
			}
		})
	}
}

// TestEnqueueRefusesWhatJSONBCannotHold: input holding U+0000 is refused
// with checkpoint.ErrInvalid and ErrUnsupported; nothing is queued and the
// thread is not made due.
func TestEnqueueRefusesWhatJSONBCannotHold(t *testing.T) {
	db := openTest(t, Config{})
	s := db.Saver()
	ctx := t.Context()
	_, _, err := s.Enqueue(ctx, checkpoint.QueuedInput{Thread: "thread-1", Key: "k1", Input: json.RawMessage(`{"s":"a\u0000b"}`)})
	if !errors.Is(err, checkpoint.ErrInvalid) || !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Enqueue of input holding U+0000 = %v, want checkpoint.ErrInvalid and ErrUnsupported", err)
	}
	if q, err := s.Queued(ctx, "thread-1", 0); err != nil || len(q) != 0 {
		t.Errorf("Queued after the refusal = %v, %v; want nothing", q, err)
	}
	b, err := s.ClaimDue(ctx, checkpoint.DueQuery{Owners: []string{"w"}, TTL: time.Minute})
	if err != nil || len(b.Threads) != 0 {
		t.Errorf("ClaimDue after the refusal = %+v, %v; want nothing due", b.Threads, err)
	}
	if _, err := s.Lease(ctx, "thread-1", ""); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("Lease(thread-1) after the refusal = %v, want ErrNotFound (no record)", err)
	}
}

// TestWorkTablesWithPsql: the due-work query the package doc gives for
// psql runs, and shows what is due and queued.
func TestWorkTablesWithPsql(t *testing.T) {
	db := openTest(t, Config{})
	s := db.Saver()
	ctx := t.Context()
	for i := range 2 {
		if _, _, err := s.Enqueue(ctx, checkpoint.QueuedInput{Thread: "thread-1", Key: fmt.Sprintf("k%d", i), Input: json.RawMessage(`{"n":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := db.Pool().Query(ctx, sqlFor(db.Schema(), docDueQuery))
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		Thread string
		Queued int64
	}
	var got []row
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, row{Thread: vals[0].(string), Queued: vals[len(vals)-1].(int64)})
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]row{{"thread-1", 2}}, got); diff != "" {
		t.Errorf("the doc's due-work query (-want +got):\n%s", diff)
	}
}

// docDueQuery is the package doc's psql query of due work, with the schema
// as $S.
const docDueQuery = `SELECT t.thread_id, to_timestamp(t.due_at / 1e9) AS due, t.lease_owner, t.due_attempts, t.due_parked,
	(SELECT count(*) FROM $S.queued_inputs q WHERE q.thread_id = t.thread_id) AS queued
FROM $S.threads t
WHERE t.checkpoint_ns = '' AND (t.due_at IS NOT NULL OR t.due_parked IS NOT NULL)
ORDER BY t.due_at`
