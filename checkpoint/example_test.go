package checkpoint_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// A runner saves two checkpoints of a thread, the second appending to a
// list channel; a second runner that still thinks the first checkpoint is
// the head is refused. Reading the head returns the list as a chain of
// blobs and the writes of the tasks that produced it.
func ExampleMemorySaver() {
	ctx := context.Background()
	clock := func() time.Time { return time.Date(2025, 1, 1, 9, 0, 0, 0, time.UTC) }
	s := checkpoint.NewMemorySaver(clock)
	ids := checkpoint.NewIDGenerator(clock, nil)
	runner := checkpoint.Lease{Owner: "runner-1", TTL: time.Minute}

	first := ids.Next("")
	err := s.Put(ctx, checkpoint.PutRequest{
		Thread: "support-42",
		Lease:  runner,
		Checkpoint: checkpoint.Checkpoint{
			ID:       first,
			Metadata: checkpoint.Metadata{Source: checkpoint.SourceInput, Step: -1},
			Versions: map[string]string{"Messages": first},
			Channels: map[string][]checkpoint.Blob{"Messages": {{Version: first, Data: json.RawMessage(`["hi"]`)}}},
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	second := ids.Next(first)
	err = s.Put(ctx, checkpoint.PutRequest{
		Thread: "support-42",
		Lease:  runner,
		Checkpoint: checkpoint.Checkpoint{
			ID:       second,
			ParentID: first,
			Metadata: checkpoint.Metadata{Source: checkpoint.SourceLoop, Step: 0},
			Versions: map[string]string{"Messages": second},
			// Only the appended item is stored.
			Channels: map[string][]checkpoint.Blob{"Messages": {{Version: second, Base: first, Append: true, Data: json.RawMessage(`["hello, how can I help?"]`)}}},
		},
		ParentWrites: []checkpoint.TaskWrites{{TaskID: "task-1", Node: "agent", Writes: []checkpoint.Write{
			{Channel: "Messages", Value: json.RawMessage(`["hello, how can I help?"]`)},
		}}},
		Release: true,
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	late := ids.Next(first)
	err = s.Put(ctx, checkpoint.PutRequest{
		Thread:     "support-42",
		Lease:      checkpoint.Lease{Owner: "runner-2", TTL: time.Minute},
		Checkpoint: checkpoint.Checkpoint{ID: late, ParentID: first, Versions: map[string]string{"Messages": first}},
	})
	var conflict *checkpoint.ConflictError
	fmt.Println("late runner refused:", errors.As(err, &conflict) && conflict.Head == second)

	head, err := s.Get(ctx, checkpoint.Ref{Thread: "support-42"}, checkpoint.GetOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("head is second:", head.Checkpoint.ID == second, "step", head.Checkpoint.Metadata.Step)
	for _, b := range head.Checkpoint.Channels["Messages"] {
		fmt.Printf("blob append=%v data=%s\n", b.Append, b.Data)
	}
	parent, err := s.Get(ctx, checkpoint.Ref{Thread: "support-42", ID: first}, checkpoint.GetOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, w := range parent.Pending {
		fmt.Printf("pending on first: %s wrote %s = %s\n", w.Node, w.Channel, w.Value)
	}
	// Output:
	// late runner refused: true
	// head is second: true step 0
	// blob append=false data=["hi"]
	// blob append=true data=["hello, how can I help?"]
	// pending on first: agent wrote Messages = ["hello, how can I help?"]
}
