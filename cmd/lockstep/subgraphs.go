package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
)

// subgraphJSON is the state of the subgraph a task runs (graph.AddSubgraph),
// read from the head of the task's namespace as state reads a thread's
// head.
type subgraphJSON struct {
	NS         string                     `json:"ns"` // checkpoint.TaskNS of the task
	Checkpoint string                     `json:"checkpoint"`
	Step       int                        `json:"step"`
	Status     string                     `json:"status"`
	Next       []string                   `json:"next"`
	Breakpoint *checkpoint.Breakpoint     `json:"breakpoint"`
	Tasks      []taskJSON                 `json:"tasks"` // each with its own subgraph, at any depth
	Values     map[string]json.RawMessage `json:"values"`
}

// maxSubgraphDepth bounds how deep state follows subgraphs.
const maxSubgraphDepth = 64

// readSubgraphs attaches to each unfinished task of tasks, tasks of the
// graph in namespace ns of thread, the state of the subgraph it runs, when
// its namespace (checkpoint.TaskNS) holds a checkpoint, at every depth.
func readSubgraphs(ctx context.Context, s checkpoint.Saver, thread, ns string, tasks []taskJSON, store approval.Store, now time.Time, depth int) error {
	if depth >= maxSubgraphDepth {
		return nil
	}
	for i := range tasks {
		t := &tasks[i]
		if t.Status == "done" {
			continue
		}
		sub := checkpoint.TaskNS(ns, t.Node, t.ID)
		tp, err := s.Get(ctx, checkpoint.Ref{Thread: thread, NS: sub}, checkpoint.GetOptions{})
		if errors.Is(err, checkpoint.ErrNotFound) {
			continue // no subgraph, or one that has not saved yet
		}
		if err != nil {
			return fmt.Errorf("read subgraph %s of thread %s: %w", quote(sub), quote(thread), err)
		}
		in, err := checkpoint.Inspect(tp, true)
		if err != nil {
			return err
		}
		st, err := buildState(ctx, tp, in, true, store, nil, now)
		if err != nil {
			return err
		}
		t.Subgraph = &subgraphJSON{NS: sub, Checkpoint: st.Checkpoint, Step: st.Step, Status: st.Status, Next: st.Next,
			Breakpoint: st.Breakpoint, Tasks: st.Tasks, Values: st.Values}
		if err := readSubgraphs(ctx, s, thread, sub, t.Subgraph.Tasks, store, now, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// printSubgraphs prints, after a task table, the subgraph of each task
// that runs one, at every depth: the task's namespace, the subgraph's
// status and next tasks, and its own task table.
func printSubgraphs(w io.Writer, tasks []taskJSON, now time.Time, path string) error {
	for _, tk := range tasks {
		sg := tk.Subgraph
		if sg == nil {
			continue
		}
		where := path + tk.Node
		if _, err := fmt.Fprintf(w, "\nsubgraph %s (task %s), namespace %s\n", clean(where), truncate(tk.ID, shortTaskID+1), clean(sg.NS)); err != nil {
			return err
		}
		kv := newTable(w)
		kv.row("  status", sg.Status)
		kv.row("  checkpoint", sg.Checkpoint)
		kv.row("  step", fmt.Sprint(sg.Step))
		kv.row("  next", list(sg.Next, 1<<10))
		if bp := sg.Breakpoint; bp != nil {
			kv.row("  breakpoint", bp.When+" "+strings.Join(bp.Nodes, ","))
		}
		if err := kv.flush(); err != nil {
			return err
		}
		if len(sg.Tasks) > 0 {
			t := newTable(w)
			t.row("  TASK", "NODE", "STATUS", "DETAIL")
			for _, st := range sg.Tasks {
				for i, d := range taskDetails(st, sg.Breakpoint, now) {
					if i == 0 {
						t.row("  "+truncate(st.ID, shortTaskID+1), st.Node, st.Status, d)
					} else {
						t.row("", "", "", d)
					}
				}
			}
			if err := t.flush(); err != nil {
				return err
			}
		}
		if err := printSubgraphs(w, sg.Tasks, now, where+" > "); err != nil {
			return err
		}
	}
	return nil
}

// waitingPaths returns the paths of the tasks a checkpoint of namespace ns
// waits in, down the subgraphs they run ("importer > verify > check"),
// and nil when none of them runs a subgraph that saved a checkpoint.
func waitingPaths(ctx context.Context, s checkpoint.Saver, thread, ns string, in *checkpoint.Inspection, depth int) ([]string, error) {
	var out []string
	nested := false
	for i := range in.Tasks {
		t := &in.Tasks[i]
		if t.Status() != "waiting" {
			continue
		}
		var below []string
		if depth < maxSubgraphDepth {
			sub := checkpoint.TaskNS(ns, t.Name, t.ID)
			tp, err := s.Get(ctx, checkpoint.Ref{Thread: thread, NS: sub}, checkpoint.GetOptions{})
			switch {
			case errors.Is(err, checkpoint.ErrNotFound):
			case err != nil:
				return nil, fmt.Errorf("read subgraph %s of thread %s: %w", quote(sub), quote(thread), err)
			default:
				sin, err := checkpoint.Inspect(tp, true)
				if err != nil {
					return nil, err
				}
				if below, err = waitingPaths(ctx, s, thread, sub, sin, depth+1); err != nil {
					return nil, err
				}
				if below == nil {
					below = waitingNames(sin)
				}
			}
		}
		if len(below) == 0 {
			out = append(out, t.Name)
			continue
		}
		nested = true
		for _, p := range below {
			out = append(out, t.Name+" > "+p)
		}
	}
	if !nested {
		return nil, nil
	}
	return out, nil
}

// waitingNames are the names of the waiting tasks of an inspection.
func waitingNames(in *checkpoint.Inspection) []string {
	var out []string
	for i := range in.Tasks {
		if in.Tasks[i].Status() == "waiting" {
			out = append(out, in.Tasks[i].Name)
		}
	}
	return out
}
