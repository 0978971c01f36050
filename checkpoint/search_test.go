package checkpoint_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/lockstepgo/lockstep/checkpoint"
)

// listerOnly hides every optional interface of a MemorySaver but
// ThreadLister.
type listerOnly struct {
	checkpoint.Saver
	tl checkpoint.ThreadLister
}

func (l listerOnly) Threads(ctx context.Context, offset, limit int) ([]checkpoint.ThreadInfo, error) {
	return l.tl.Threads(ctx, offset, limit)
}

// bare hides every optional interface.
type bare struct{ checkpoint.Saver }

// TestSearchFallsBackOnThreadLister: checkpoint.Search over a saver that is
// no Searcher but lists its threads finds what Search finds; over a saver
// that is neither it fails with errors.ErrUnsupported.
func TestSearchFallsBackOnThreadLister(t *testing.T) {
	ctx := context.Background()
	m := checkpoint.NewMemorySaver(nil)
	ids := checkpoint.NewIDGenerator(nil, nil)
	for i, th := range []string{"a", "b", "a", "c", "b"} {
		head := ""
		if tp, err := m.Get(ctx, checkpoint.Ref{Thread: th}, checkpoint.GetOptions{}); err == nil {
			head = tp.Checkpoint.ID
		}
		step := -1
		if head != "" {
			step = 0
		}
		id := ids.Next(head)
		err := m.Put(ctx, checkpoint.PutRequest{
			Thread: th,
			Checkpoint: checkpoint.Checkpoint{ID: id, ParentID: head,
				Metadata: checkpoint.Metadata{Source: checkpoint.SourceLoop, Step: step, Extra: map[string]any{"i": i, "user": fmt.Sprint("u", i%2)}},
				Versions: map[string]string{"x": id},
				Channels: map[string][]checkpoint.Blob{"x": {{Version: id, Data: json.RawMessage(fmt.Sprint(i))}}}},
			Lease: checkpoint.Lease{Owner: "o", TTL: time.Minute},
		})
		if err != nil {
			t.Fatalf("Put %d: %v", i, err)
		}
	}
	for _, opts := range []checkpoint.ListOptions{
		{},
		{Filter: map[string]any{"user": "u0"}},
		{Limit: 2},
		{Filter: map[string]any{"user": "u1"}, Limit: 1},
	} {
		want, err := m.Search(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		got, err := checkpoint.Search(ctx, listerOnly{m, m}, opts)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Search(%+v) over a ThreadLister (-Searcher +fallback):\n%s", opts, diff)
		}
	}
	if _, err := checkpoint.Search(ctx, bare{m}, checkpoint.ListOptions{}); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Search over a bare saver = %v, want errors.ErrUnsupported", err)
	}
}
