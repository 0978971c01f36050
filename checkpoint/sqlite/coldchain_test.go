package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
)

type coldMsg struct {
	ID   string `json:"id"`
	Text string `json:"text"`
}

type coldState struct {
	Msgs []coldMsg `lockstep:"append"`
}

// coldGraph appends one message of about 1 KiB per superstep until the
// state holds n.
func coldGraph(s checkpoint.Saver, n int) (*graph.Runnable[coldState], error) {
	return graph.New[coldState]().
		AddNode("talk", func(ctx context.Context, st coldState) (graph.Update[coldState], error) {
			k := len(st.Msgs)
			return graph.Set(coldState{Msgs: []coldMsg{{ID: fmt.Sprint("m", k), Text: fmt.Sprintf("%d:%s", k, strings.Repeat("x", 1000))}}}, "Msgs"), nil
		}).
		AddEdge(graph.START, "talk").
		AddConditionalEdges("talk", func(ctx context.Context, st coldState) ([]string, error) {
			if len(st.Msgs) >= n {
				return []string{graph.END}, nil
			}
			return []string{"talk"}, nil
		}, "talk", graph.END).
		Compile(graph.WithSaver(s), graph.WithRecursionLimit(n+10))
}

// coldThread writes a thread of n appended messages on a new file and
// returns the file, the run's final state and the head's chain of Msgs
// (which starts at a whole value: n is past the first snapshot).
func coldThread(t testing.TB, n int) (string, coldState, []checkpoint.Blob) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cold.db")
	s := openAt(t, path, Config{Synchronous: SyncNormal})
	r, err := coldGraph(s, n)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Invoke(context.Background(), "long", graph.Update[coldState]{})
	if err != nil {
		t.Fatal(err)
	}
	tp, err := s.Get(context.Background(), checkpoint.Ref{Thread: "long"}, checkpoint.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	chain := tp.Checkpoint.Channels["Msgs"]
	if len(chain) < 3 || chain[0].Append {
		t.Fatalf("the head's chain of Msgs has %d blobs, the first an append: want a whole value first", len(chain))
	}
	closeChecked(t, s)
	return path, res.Values, chain
}

// TestColdChainReads: a saver opened on the file, which never saw the
// thread, reads the latest state of a long append chain (a whole value,
// gathered appends, single appends) exactly as the run built it.
func TestColdChainReads(t *testing.T) {
	path, want, _ := coldThread(t, 300)
	s := openAt(t, path, Config{Synchronous: SyncNormal})
	r, err := coldGraph(s, 300)
	if err != nil {
		t.Fatal(err)
	}
	st, err := r.GetState(t.Context(), "long")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, st.Values); diff != "" {
		t.Fatalf("cold GetState (-run +read):\n%s", diff)
	}
}

// TestCorruptChainBase (R12): the whole value a chain starts at, or a
// gathered append on it, damaged in the file is a *checkpoint.CorruptError
// naming the thread for a reader that never saw the thread (the saver's
// Get and a Runnable's GetState), never a shorter or different value.
func TestCorruptChainBase(t *testing.T) {
	path, _, chain := coldThread(t, 300)
	base, seg := chain[0].Version, chain[1].Version
	for _, tc := range []struct {
		name string
		sql  string // ?1 = the row
		row  string
		fix  bool // recompute the row's checksum, as a tamperer who knows the format would
	}{
		{"base flipped inside valid JSON", `UPDATE checkpoints SET channels = replace(channels, 'm7"', 'm8"') WHERE thread_id = 'long' AND checkpoint_id = ?1`, base, false},
		{"base truncated", `UPDATE checkpoints SET channels = substr(channels, 1, length(channels) / 2) WHERE thread_id = 'long' AND checkpoint_id = ?1`, base, false},
		{"base truncated, checksum fixed", `UPDATE checkpoints SET channels = substr(channels, 1, length(channels) / 2) WHERE thread_id = 'long' AND checkpoint_id = ?1`, base, true},
		{"base gone", `DELETE FROM checkpoints WHERE thread_id = 'long' AND checkpoint_id = ?1`, base, false},
		{"gathered append flipped", `UPDATE checkpoints SET channels = replace(channels, 'xxxx', 'xxxy') WHERE thread_id = 'long' AND checkpoint_id = ?1`, seg, false},
		{"gathered append's base renamed, checksum fixed", `UPDATE checkpoints SET channels = replace(channels, '"base":"` + base + `"', '"base":"00000000-0000-7000-8000-000000000000"') WHERE thread_id = 'long' AND checkpoint_id = ?1`, seg, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "bad.db")
			copyFile(t, path, p)
			s := openAt(t, p, Config{Synchronous: SyncNormal})
			res, err := s.DB().ExecContext(t.Context(), tc.sql, tc.row)
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				t.Fatalf("corruption touched %d rows, want 1", n)
			}
			if tc.fix {
				fixCRC(t, s.DB(), "long", tc.row)
			}
			closeChecked(t, s)
			s = openAt(t, p, Config{Synchronous: SyncNormal})
			check := func(op string, err error) {
				t.Helper()
				var ce *checkpoint.CorruptError
				if !errors.As(err, &ce) || ce.Thread != "long" {
					t.Fatalf("%s: %v, want a *checkpoint.CorruptError naming thread long", op, err)
				}
			}
			_, err = s.Get(t.Context(), checkpoint.Ref{Thread: "long"}, checkpoint.GetOptions{})
			check("Get", err)
			r, err := coldGraph(s, 300)
			if err != nil {
				t.Fatal(err)
			}
			_, err = r.GetState(t.Context(), "long")
			check("GetState", err)
		})
	}
}

// FuzzCorruptChainBase: any byte of the whole value a long chain starts
// at, changed in the file, makes a cold read fail with a
// *checkpoint.CorruptError; it never returns a value.
func FuzzCorruptChainBase(f *testing.F) {
	path, _, chain := coldThread(f, 150)
	base := chain[0].Version
	f.Add(uint32(0), byte('!'))
	f.Add(uint32(17), byte('y'))
	f.Add(uint32(4000), byte(0))
	f.Add(uint32(60000), byte('"'))
	f.Fuzz(func(t *testing.T, at uint32, b byte) {
		p := filepath.Join(t.TempDir(), "bad.db")
		copyFile(t, path, p)
		s := openAt(t, p, Config{Synchronous: SyncNormal})
		var n int
		if err := s.DB().QueryRowContext(t.Context(), `SELECT length(CAST(channels AS BLOB)) FROM checkpoints WHERE thread_id = 'long' AND checkpoint_id = ?`, base).Scan(&n); err != nil {
			t.Fatal(err)
		}
		i := int(at%uint32(n)) + 1
		res, err := s.DB().ExecContext(t.Context(), `UPDATE checkpoints SET channels = CAST(substr(CAST(channels AS BLOB), 1, ?1 - 1) || CAST(char(?2) AS BLOB) || substr(CAST(channels AS BLOB), ?1 + 1) AS TEXT)
			WHERE thread_id = 'long' AND checkpoint_id = ?3 AND substr(CAST(channels AS BLOB), ?1, 1) <> CAST(char(?2) AS BLOB)`, i, int(b), base)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			t.Skip("the byte is already that value")
		}
		closeChecked(t, s)
		s = openAt(t, p, Config{Synchronous: SyncNormal})
		r, err := coldGraph(s, 150)
		if err != nil {
			t.Fatal(err)
		}
		st, err := r.GetState(t.Context(), "long")
		var ce *checkpoint.CorruptError
		if !errors.As(err, &ce) {
			t.Fatalf("byte %d of the base set to %q: GetState returned %d messages and %v, want a *checkpoint.CorruptError", i, b, len(st.Values.Msgs), err)
		}
	})
}
