package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// historyJSON is the output of history --json.
type historyJSON struct {
	Thread      string           `json:"thread"`
	Checkpoints []checkpointJSON `json:"checkpoints"`
	// More says that older checkpoints exist than --limit showed; list
	// them with --before NextBefore.
	More       bool   `json:"more"`
	NextBefore string `json:"next_before"`
}

// checkpointJSON is one checkpoint of a thread's history.
type checkpointJSON struct {
	Checkpoint string    `json:"checkpoint"`
	Parent     string    `json:"parent"`
	Head       bool      `json:"head"`
	Step       int       `json:"step"`
	Source     string    `json:"source"`
	Next       []string  `json:"next"`
	CreatedAt  time.Time `json:"created_at"`
	// Values is the state (a JSON object), with --values only.
	Values json.RawMessage `json:"values,omitempty"`
}

func historyCommand(fs *flag.FlagSet) runner {
	limit := fs.Int("limit", 50, "show at most `N` checkpoints (0: all)")
	before := fs.String("before", "", "show checkpoints older than checkpoint `ID` (the next page)")
	values := fs.Bool("values", false, "include each checkpoint's values")
	return func(ctx context.Context, e *env, args []string) error {
		thread := args[0]
		if *limit < 0 {
			return usageError("history: --limit must be 0 (all) or more", "")
		}
		s, err := e.openSaver()
		if err != nil {
			return err
		}
		defer s.Close()
		head, err := e.readHead(ctx, s, thread)
		if err != nil {
			return err
		}
		if *before != "" {
			// A page starts after a checkpoint of this thread; anything
			// else would silently list nothing (or everything).
			_, err := s.Get(ctx, checkpoint.Ref{Thread: thread, ID: *before}, checkpoint.GetOptions{})
			if errors.Is(err, checkpoint.ErrNotFound) {
				return notFound(fmt.Sprintf("thread %s has no checkpoint %s", quote(thread), quote(*before)),
					"run `lockstep history "+shellArg(thread)+"`: --before takes one of the IDs it lists", err)
			}
			if err != nil {
				return fmt.Errorf("read thread %s at %s: %w", quote(thread), quote(*before), err)
			}
		}
		ask := 0
		if *limit > 0 {
			ask = *limit + 1
		}
		tps, err := s.List(ctx, thread, checkpoint.ListOptions{Before: *before, Limit: ask})
		if err != nil {
			return fmt.Errorf("list the checkpoints of thread %s: %w", quote(thread), err)
		}
		out := historyJSON{Thread: thread, Checkpoints: []checkpointJSON{}}
		if *limit > 0 && len(tps) > *limit {
			tps, out.More = tps[:*limit], true
		}
		for _, tp := range tps {
			cp := tp.Checkpoint
			latest := cp.ID == head.Checkpoint.ID
			in, err := checkpoint.Inspect(tp, latest)
			if err != nil {
				return err
			}
			c := checkpointJSON{Checkpoint: cp.ID, Parent: cp.ParentID, Head: latest, Step: cp.Metadata.Step,
				Source: string(cp.Metadata.Source), Next: nonNil(in.Next), CreatedAt: cp.CreatedAt.UTC()}
			if *values {
				v, err := compactJSON(in.Values)
				if err != nil {
					return err
				}
				c.Values = json.RawMessage(v)
			}
			out.Checkpoints = append(out.Checkpoints, c)
		}
		if out.More {
			out.NextBefore = out.Checkpoints[len(out.Checkpoints)-1].Checkpoint
		}
		if e.opts.json {
			return e.writeJSON(out)
		}
		return e.printHistory(out, *values)
	}
}

func (e *env) printHistory(out historyJSON, values bool) error {
	if len(out.Checkpoints) == 0 {
		_, err := fmt.Fprintf(e.stdout, "no checkpoints of thread %s before the one given\n", quote(out.Thread))
		return err
	}
	t := newTable(e.stdout)
	head := []string{"CHECKPOINT", "STEP", "SOURCE", "NEXT", "CREATED"}
	if values {
		head = append(head, "VALUES")
	}
	t.row(head...)
	for _, c := range out.Checkpoints {
		id := c.Checkpoint
		if c.Head {
			id += " (head)"
		}
		row := []string{id, strconv.Itoa(c.Step), c.Source, list(c.Next, previewNext), formatTime(c.CreatedAt)}
		if values {
			row = append(row, unescapeHTML(string(c.Values)))
		}
		t.row(row...)
	}
	if err := t.flush(); err != nil {
		return err
	}
	if out.More {
		_, err := fmt.Fprintf(e.stdout, "older checkpoints: lockstep history %s --before %s\n", clean(shellArg(out.Thread)), out.NextBefore)
		return err
	}
	return nil
}
