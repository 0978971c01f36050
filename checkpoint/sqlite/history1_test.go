package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// schema1Start is the fake time at which testdata/schema1.sqlite was written.
var schema1Start = time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)

// schema1Threads are the threads schema1History writes; "corrupt" is
// tampered with in the fixture after it was written.
var schema1Threads = []string{"linear", "forked", "nested", "pruned", "claimed", "deleted", "marked", "released", "leased", "corrupt"}

// history builds checkpoints on any saver for the schema-1 fixture.
type history struct {
	ctx      context.Context
	s        checkpoint.Saver
	clock    *fakeClock
	ids      *checkpoint.IDGenerator
	err      error
	heads    map[string]string            // thread/ns -> head
	versions map[string]map[string]string // checkpoint -> versions
	steps    map[string]int               // checkpoint -> step
}

type change1 struct {
	set, add map[string]string // channel -> JSON value / appended items
}

func (h *history) put(thread, ns, owner string, c change1, mod func(*checkpoint.PutRequest)) string {
	if h.err != nil {
		return ""
	}
	h.clock.Advance(time.Second)
	key := thread + "/" + ns
	parent := h.heads[key]
	req := checkpoint.PutRequest{Thread: thread, NS: ns, Lease: checkpoint.Lease{Owner: owner, TTL: time.Minute}}
	req.Checkpoint.ParentID = parent
	if mod != nil {
		mod(&req) // may change the parent (a fork)
	}
	parent = req.Checkpoint.ParentID
	id := h.ids.Next(parent)
	cp := &req.Checkpoint
	cp.ID, cp.CreatedAt = id, h.clock.Now()
	cp.Metadata = checkpoint.Metadata{Source: checkpoint.SourceLoop, Step: h.steps[parent] + 1, Parents: map[string]string{}, RunID: owner, Extra: cp.Metadata.Extra}
	if parent == "" {
		cp.Metadata.Source, cp.Metadata.Step = checkpoint.SourceInput, -1
	}
	cp.Versions = maps.Clone(h.versions[parent])
	if cp.Versions == nil {
		cp.Versions = map[string]string{}
	}
	cp.Channels = map[string][]checkpoint.Blob{}
	for ch, v := range c.set {
		cp.Versions[ch] = id
		cp.Channels[ch] = []checkpoint.Blob{{Version: id, Data: json.RawMessage(v)}}
	}
	for ch, items := range c.add {
		cp.Channels[ch] = []checkpoint.Blob{{Version: id, Append: true, Base: cp.Versions[ch], Data: json.RawMessage(items)}}
		cp.Versions[ch] = id
	}
	if err := h.s.Put(h.ctx, req); err != nil {
		h.err = fmt.Errorf("put %s: %w", key, err)
		return ""
	}
	h.heads[key] = id
	h.versions[id] = cp.Versions
	h.steps[id] = cp.Metadata.Step
	return id
}

func tw(task, node string, writes ...string) checkpoint.TaskWrites {
	t := checkpoint.TaskWrites{TaskID: task, Node: node, Path: "pull"}
	for i := 0; i+1 < len(writes); i += 2 {
		t.Writes = append(t.Writes, checkpoint.Write{Channel: writes[i], Value: json.RawMessage(writes[i+1])})
	}
	return t
}

func (h *history) do(what string, err error) {
	if h.err == nil && err != nil {
		h.err = fmt.Errorf("%s: %w", what, err)
	}
}

// schema1History writes the history stored in testdata/schema1.sqlite on s,
// with a fake clock starting at schema1Start: linear chains with append
// channels and task writes, a fork, a child namespace, a pruned chain
// whose bases outlive their checkpoints, a claimed thread without
// checkpoints, a deleted thread, breakpoint markers, a pending interrupt,
// a released and a leased thread. The fixture was written by the schema-1
// code (commit 3190151); the migration test replays the same history on a
// MemorySaver and compares.
func schema1History(ctx context.Context, s checkpoint.Saver, clock *fakeClock) error {
	h := &history{ctx: ctx, s: s, clock: clock, ids: checkpoint.NewIDGenerator(clock.Now, rand.NewChaCha8([32]byte{'s', 'c', 'h', 'e', 'm', 'a', '1'})),
		heads: map[string]string{}, versions: map[string]map[string]string{}, steps: map[string]int{}}
	lease := func(owner string) checkpoint.Lease { return checkpoint.Lease{Owner: owner, TTL: time.Minute} }
	// linear: six steps, then a pending interrupt on the head.
	h.put("linear", "", "runner-a", change1{set: map[string]string{"__start__": `{"N":0}`}}, nil)
	for i := 0; i < 5; i++ {
		h.put("linear", "", "runner-a", change1{set: map[string]string{"N": fmt.Sprint(i)}, add: map[string]string{"Log": fmt.Sprintf(`["item %d"]`, i)}},
			func(r *checkpoint.PutRequest) {
				r.ParentWrites = []checkpoint.TaskWrites{tw(fmt.Sprintf("task-%d", i), "n", "N", fmt.Sprint(i), "Log", fmt.Sprintf(`["item %d"]`, i))}
			})
	}
	h.do("linear writes", s.PutWrites(ctx, checkpoint.WritesRequest{Ref: checkpoint.Ref{Thread: "linear", ID: h.heads["linear/"]}, Lease: lease("runner-a"),
		Tasks: []checkpoint.TaskWrites{
			tw("task-ask", "ask", checkpoint.ChannelInterrupt, `[{"id":"i1","value":{"question":"approve?"}}]`),
			tw("task-done", "other", "N", `42`),
		}}))
	// forked: four steps, a fork of the second, one step after it.
	var second string
	for i := 0; i < 4; i++ {
		id := h.put("forked", "", "runner-b", change1{add: map[string]string{"Msgs": fmt.Sprintf(`[{"i":%d}]`, i)}}, func(r *checkpoint.PutRequest) {
			r.Checkpoint.Metadata.Extra = map[string]any{"kind": "main", "n": float64(i)}
		})
		if i == 1 {
			second = id
		}
	}
	h.put("forked", "", "runner-b", change1{add: map[string]string{"Msgs": `[{"fork":true}]`}, set: map[string]string{"X": `"fork"`}}, func(r *checkpoint.PutRequest) {
		r.Checkpoint.ParentID, r.Fork = second, true
		r.ParentWrites = []checkpoint.TaskWrites{tw("task-f", "f", "X", `"fork"`)}
	})
	h.put("forked", "", "runner-b", change1{add: map[string]string{"Msgs": `[{"after":1}]`}}, nil)
	// nested: the root and a child namespace.
	for i := 0; i < 2; i++ {
		h.put("nested", "", "runner-c", change1{set: map[string]string{"Root": fmt.Sprint(i)}}, nil)
		h.put("nested", "child:1", "runner-c", change1{add: map[string]string{"Log": fmt.Sprintf(`["child %d"]`, i)}}, func(r *checkpoint.PutRequest) {
			r.Checkpoint.Metadata.Parents = map[string]string{"": "parent"}
		})
	}
	// pruned: eight steps of one append chain, pruned to the last two.
	for i := 0; i < 8; i++ {
		h.put("pruned", "", "runner-d", change1{add: map[string]string{"Log": fmt.Sprintf(`["p%d"]`, i)}, set: map[string]string{"N": fmt.Sprint(i)}}, func(r *checkpoint.PutRequest) {
			if i > 0 {
				r.ParentWrites = []checkpoint.TaskWrites{tw(fmt.Sprintf("task-%d", i), "n", "Log", fmt.Sprintf(`["p%d"]`, i))}
			}
		})
	}
	if p, ok := s.(checkpoint.Pruner); ok {
		_, err := p.Prune(ctx, "pruned", "", 2)
		h.do("prune", err)
	}
	// claimed: a lease and nothing else.
	h.do("claim", s.Claim(ctx, checkpoint.Ref{Thread: "claimed"}, lease("runner-e")))
	// deleted: written, then deleted.
	h.put("deleted", "", "runner-f", change1{set: map[string]string{"N": `1`}}, nil)
	h.put("deleted", "", "runner-f", change1{set: map[string]string{"N": `2`}}, nil)
	h.do("delete", s.DeleteThread(ctx, "deleted"))
	// marked: a breakpoint marker saved with the checkpoint.
	h.put("marked", "", "runner-g", change1{set: map[string]string{"N": `1`}}, nil)
	h.put("marked", "", "runner-g", change1{set: map[string]string{"N": `2`}}, func(r *checkpoint.PutRequest) {
		r.Writes = []checkpoint.TaskWrites{tw(checkpoint.NullTaskID, "", checkpoint.ChannelBreakpoint, `{"when":"before","nodes":["n"]}`)}
		r.Checkpoint.Mark = r.Checkpoint.ParentID
	})
	// released: the last Put drops the lease.
	h.put("released", "", "runner-h", change1{set: map[string]string{"N": `1`}}, nil)
	h.put("released", "", "runner-h", change1{set: map[string]string{"N": `2`}}, func(r *checkpoint.PutRequest) { r.Release = true })
	// leased: renewed by a Claim.
	h.put("leased", "", "runner-i", change1{set: map[string]string{"N": `1`}}, nil)
	clock.Advance(10 * time.Second)
	h.do("renew", s.Claim(ctx, checkpoint.Ref{Thread: "leased", ID: h.heads["leased/"]}, lease("runner-i")))
	// corrupt: three steps; the fixture flips a stored item afterwards.
	for i := 0; i < 3; i++ {
		h.put("corrupt", "", "runner-j", change1{add: map[string]string{"Log": fmt.Sprintf(`["c%d"]`, i)}}, nil)
	}
	return h.err
}
