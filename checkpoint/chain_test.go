package checkpoint_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// chainOf returns n chained requests on a new thread.
func chainOf(n int) []checkpoint.PutRequest {
	ids := checkpoint.NewIDGenerator(nil, nil)
	lease := checkpoint.Lease{Owner: "runner", TTL: time.Minute}
	var reqs []checkpoint.PutRequest
	parent := ""
	for i := range n {
		id := ids.Next(parent)
		cp := checkpoint.Checkpoint{ID: id, ParentID: parent,
			Metadata: checkpoint.Metadata{Source: checkpoint.SourceLoop, Step: i - 1},
			Versions: map[string]string{"x": id}, Channels: map[string][]checkpoint.Blob{"x": {{Version: id, Data: json.RawMessage(`1`)}}}}
		reqs = append(reqs, checkpoint.PutRequest{Thread: "t", Checkpoint: cp, Lease: lease})
		parent = id
	}
	return reqs
}

// TestPutChainHelper: checkpoint.PutChain saves a chain with one PutChain
// on a ChainPutter and with Puts in order on any other saver; on both, a
// request list that is not a chain fails with ErrInvalid before anything is
// written.
func TestPutChainHelper(t *testing.T) {
	savers := map[string]func() checkpoint.Saver{
		"ChainPutter": func() checkpoint.Saver { return checkpoint.NewMemorySaver(nil) },
		"Put only":    func() checkpoint.Saver { return struct{ checkpoint.Saver }{checkpoint.NewMemorySaver(nil)} },
	}
	for name, newSaver := range savers {
		t.Run(name, func(t *testing.T) {
			s := newSaver()
			reqs := chainOf(3)
			if err := checkpoint.PutChain(t.Context(), s, reqs...); err != nil {
				t.Fatalf("PutChain: %v", err)
			}
			tps, err := s.List(t.Context(), "t", checkpoint.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, tp := range tps {
				got = append(got, tp.Checkpoint.ID)
			}
			want := []string{reqs[2].Checkpoint.ID, reqs[1].Checkpoint.ID, reqs[0].Checkpoint.ID}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("history (-want +got):\n%s", diff)
			}

			s = newSaver()
			bad := chainOf(3)
			bad[0].Release = true
			if err := checkpoint.PutChain(t.Context(), s, bad...); !errors.Is(err, checkpoint.ErrInvalid) {
				t.Errorf("PutChain releasing midway: %v, want ErrInvalid", err)
			}
			if _, err := s.Get(t.Context(), checkpoint.Ref{Thread: "t"}, checkpoint.GetOptions{}); !errors.Is(err, checkpoint.ErrNotFound) {
				t.Errorf("after a refused chain, Get = %v, want ErrNotFound", err)
			}
		})
	}
}
