package checkpoint_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/checkpointtest"
)

// TestMemorySaver runs the conformance suite against MemorySaver. Its
// Reopen is the identity: memory does not survive a restart, but the
// reopen cases still run their code paths against it.
func TestMemorySaver(t *testing.T) {
	checkpointtest.Run(t, checkpointtest.Options{
		New: func(t *testing.T, now checkpoint.Clock) checkpoint.Saver {
			return vacuumingMemory{checkpoint.NewMemorySaver(now)}
		},
		Reopen: func(t *testing.T, s checkpoint.Saver) checkpoint.Saver { return s },
	})
}

// vacuumingMemory adds a no-op Vacuum to MemorySaver, which has no space
// to give back, so that the suite's Vacuumer cases run here too.
type vacuumingMemory struct{ *checkpoint.MemorySaver }

func (vacuumingMemory) Vacuum(ctx context.Context, pages int) error { return ctx.Err() }

// TestBaseSaverOnly runs the suite against a saver that has only the
// Saver methods and cannot reopen: the optional groups and the reopen
// cases skip, and every other case still passes.
func TestBaseSaverOnly(t *testing.T) {
	checkpointtest.Run(t, checkpointtest.Options{
		New: func(t *testing.T, now checkpoint.Clock) checkpoint.Saver {
			return struct{ checkpoint.Saver }{checkpoint.NewMemorySaver(now)}
		},
	})
}

// Pruning a thread that was claimed but has no checkpoint yet deletes
// nothing (it used to dereference the missing head).
func TestMemoryPruneClaimedThread(t *testing.T) {
	s := checkpoint.NewMemorySaver(nil)
	if err := s.Claim(context.Background(), checkpoint.Ref{Thread: "t"}, checkpoint.Lease{Owner: "o", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Prune(context.Background(), "t", "", 1); n != 0 || err != nil {
		t.Errorf("Prune = %d, %v; want 0, nil", n, err)
	}
}

// The values of a put's pending writes (ParentWrites and Writes) are
// copied into one array per checkpoint: changing the request afterwards,
// or appending to a value a Get returned, changes nothing stored.
func TestMemoryPutWritesCopied(t *testing.T) {
	ctx := context.Background()
	s := checkpoint.NewMemorySaver(nil)
	lease := checkpoint.Lease{Owner: "o", TTL: time.Minute}
	step := -1
	put := func(id, parent string, parentWrites, writes []checkpoint.TaskWrites) {
		t.Helper()
		req := checkpoint.PutRequest{Thread: "t", Lease: lease, ParentWrites: parentWrites, Writes: writes,
			Checkpoint: checkpoint.Checkpoint{ID: id, ParentID: parent, Metadata: checkpoint.Metadata{Source: checkpoint.SourceLoop, Step: step}}}
		step++
		if err := s.Put(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	a, b, c := []byte(`"aa"`), []byte(`"bb"`), []byte(`"cc"`)
	put("1", "", nil, []checkpoint.TaskWrites{{TaskID: "x", Writes: []checkpoint.Write{{Channel: "w", Value: c}}}})
	put("2", "1", []checkpoint.TaskWrites{{TaskID: "t1", Writes: []checkpoint.Write{{Channel: "u", Value: a}, {Channel: "v", Value: b}}}}, nil)
	copy(a, `"AA"`)
	copy(b, `"BB"`)
	copy(c, `"CC"`)
	tp, err := s.Get(ctx, checkpoint.Ref{Thread: "t", ID: "1"}, checkpoint.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = append(tp.Pending[0].Value, `XX`...) // t1's "u": must not reach "v"
	tp, err = s.Get(ctx, checkpoint.Ref{Thread: "t", ID: "1"}, checkpoint.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range tp.Pending {
		got = append(got, w.TaskID+" "+w.Channel+" "+string(w.Value))
	}
	want := []string{`t1 u "aa"`, `t1 v "bb"`, `x w "cc"`}
	if len(got) != len(want) {
		t.Fatalf("pending = %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("pending = %q, want %q", got, want)
			break
		}
	}
}
