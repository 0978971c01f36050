package sqlite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// TestJoinErrors: the error of a Join run in the saver's transaction, on
// each write that runs one (Put, PutWrites, Fenced). A failure of SQLite
// itself, as a store on database/sql hands it back (the driver's error,
// wrapped with %w), comes back as the saver's other failures do, a
// *StoreError that still unwraps to the driver's error and matches
// ErrStoreBusy when SQLite was busy, as the Postgres saver's stores
// return theirs; the store's own answers come back as they are. Nothing
// of the write lands either way.
func TestJoinErrors(t *testing.T) {
	errAnswer := errors.New("store: approval a-1 has no decision")
	tests := []struct {
		name string
		join checkpoint.Join
		// store: want a *StoreError (of op) unwrapping to a sqlite3.Error
		// of code; else want errors.Is(err, is) and no *StoreError.
		store bool
		code  sqlite3.ErrNo
		busy  bool
		is    error
	}{
		{name: "a statement SQLite refuses", store: true, code: sqlite3.ErrError, join: func(ctx context.Context, tx any) error {
			_, err := tx.(checkpoint.SQLTx).ExecContext(ctx, `INSERT INTO no_such_table (x) VALUES (1)`)
			return fmt.Errorf("store: consume approval a-1: %w", err)
		}},
		{name: "SQLite busy", store: true, code: sqlite3.ErrBusy, busy: true, join: func(ctx context.Context, tx any) error {
			return fmt.Errorf("store: consume approval a-1: %w", sqlite3.Error{Code: sqlite3.ErrBusy})
		}},
		{name: "the store's answer", is: errAnswer, join: func(ctx context.Context, tx any) error { return errAnswer }},
		{name: "not joinable", is: checkpoint.ErrNotJoinable, join: func(ctx context.Context, tx any) error {
			return fmt.Errorf("store: %w: opened on another database", checkpoint.ErrNotJoinable)
		}},
	}
	type write struct {
		name, op string
		run      func(ctx context.Context, s *Saver, head string, j checkpoint.Join) error
	}
	lease := checkpoint.Lease{Owner: "me", TTL: time.Hour}
	writes := []write{
		{"Put", "put", func(ctx context.Context, s *Saver, head string, j checkpoint.Join) error {
			id := checkpoint.NewIDGenerator(nil, nil).Next(head)
			return s.Put(ctx, checkpoint.PutRequest{Thread: "t", Lease: lease, Joins: []checkpoint.Join{j}, Checkpoint: checkpoint.Checkpoint{
				ID: id, ParentID: head, CreatedAt: time.Unix(1700000001, 0).UTC(),
				Metadata: checkpoint.Metadata{Source: checkpoint.SourceLoop, Step: 0, Parents: map[string]string{}},
				Versions: map[string]string{"N": id}, Channels: map[string][]checkpoint.Blob{"N": {{Version: id, Data: json.RawMessage(`2`)}}},
			}})
		}},
		{"PutWrites", "put writes", func(ctx context.Context, s *Saver, head string, j checkpoint.Join) error {
			return s.PutWrites(ctx, checkpoint.WritesRequest{Ref: checkpoint.Ref{Thread: "t", ID: head}, Lease: lease, Joins: []checkpoint.Join{j},
				Tasks: []checkpoint.TaskWrites{{TaskID: "task", Node: "n", Path: "pull", Writes: []checkpoint.Write{{Channel: "N", Value: json.RawMessage(`3`)}}}}})
		}},
		{"Fenced", "fenced write", func(ctx context.Context, s *Saver, head string, j checkpoint.Join) error {
			return s.Fenced(ctx, "t", lease.Owner, j)
		}},
	}
	for _, w := range writes {
		for _, tc := range tests {
			t.Run(w.name+"/"+tc.name, func(t *testing.T) {
				ctx := t.Context()
				s := openTemp(t, Config{Synchronous: SyncNormal})
				head := checkpoint.NewIDGenerator(nil, nil).Next("")
				if err := s.Put(ctx, checkpoint.PutRequest{Thread: "t", Lease: lease, Checkpoint: checkpoint.Checkpoint{
					ID: head, CreatedAt: time.Unix(1700000000, 0).UTC(),
					Metadata: checkpoint.Metadata{Source: checkpoint.SourceInput, Step: -1, Parents: map[string]string{}},
					Versions: map[string]string{"N": head}, Channels: map[string][]checkpoint.Blob{"N": {{Version: head, Data: json.RawMessage(`1`)}}},
				}}); err != nil {
					t.Fatal(err)
				}
				before, err := s.Get(ctx, checkpoint.Ref{Thread: "t"}, checkpoint.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}

				err = w.run(ctx, s, head, tc.join)
				var se *StoreError
				if tc.store {
					var de sqlite3.Error
					switch {
					case !errors.As(err, &se):
						t.Errorf("%v (%T): want a *StoreError", err, err)
					case se.Op != w.op || se.Thread != "t" || se.Commit:
						t.Errorf("%+v: want a *StoreError of %q on thread t, not of a commit", se, w.op)
					case !errors.As(err, &de) || de.Code != tc.code:
						t.Errorf("%v: want the driver's error, code %v", err, tc.code)
					case errors.Is(err, ErrStoreBusy) != tc.busy:
						t.Errorf("%v: errors.Is(err, ErrStoreBusy) = %t, want %t", err, !tc.busy, tc.busy)
					}
				} else if !errors.Is(err, tc.is) || errors.As(err, &se) {
					t.Errorf("%v (%T): want the join's own error, matching %v, as it is", err, err, tc.is)
				}

				after, err := s.Get(ctx, checkpoint.Ref{Thread: "t"}, checkpoint.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(before, after); d != "" {
					t.Errorf("the failed write changed the head (-before +after):\n%s", d)
				}
			})
		}
	}
}
