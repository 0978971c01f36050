package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// checkpointJSON is one checkpoint of a thread's history.
type checkpointJSON struct {
	Checkpoint string `json:"checkpoint"`
	Parent     string `json:"parent"`
	Head       bool   `json:"head"`
	Step       int    `json:"step"`
	Source     string `json:"source"`
	// RunKey is the idempotency key of the run an input checkpoint
	// started (graph.RunKey), when it had one.
	RunKey string `json:"run_key,omitempty"`
	// Durability is the durability mode of the run that wrote the
	// checkpoint (sync, async or exit), or unknown when the checkpoint
	// does not record it (written before lockstep did).
	Durability string    `json:"durability"`
	Next       []string  `json:"next"`
	CreatedAt  time.Time `json:"created_at"`
	// Values is the state (a JSON object), with --values only.
	Values json.RawMessage `json:"values,omitempty"`
	// Waiting are the paths of the tasks the checkpoint waits in down
	// the subgraphs they run ("importer > verify > check"), when one of
	// them runs a subgraph (graph.AddSubgraph); omitted otherwise.
	Waiting []string `json:"waiting,omitempty"`
}

func historyCommand(fs *flag.FlagSet) runner {
	limit := fs.Int("limit", 50, "show at most `N` checkpoints (0: all)")
	before := fs.String("before", "", "show checkpoints older than checkpoint `ID` (the next page)")
	cursor := fs.String("cursor", "", "the same as --before: continue after the page that printed `CURSOR` (a checkpoint ID)")
	values := fs.Bool("values", false, "include each checkpoint's values")
	return func(ctx context.Context, e *env, args []string) error {
		thread := args[0]
		if *limit < 0 {
			return usageError("history: --limit must be 0 (all) or more", "")
		}
		switch {
		case *cursor == "":
		case *before != "" && *before != *cursor:
			return usageError("history: --before and --cursor name different checkpoints", "pass one of them")
		default:
			*before = *cursor
		}
		s, err := e.openSaver(false)
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
		h := &history{thread: thread, head: head.Checkpoint.ID, values: *values, tps: tps,
			nested: func(tp *checkpoint.Tuple, in *checkpoint.Inspection) ([]string, error) {
				return waitingPaths(ctx, s, thread, "", in, 0)
			}}
		if *limit > 0 && len(tps) > *limit {
			h.tps, h.more = tps[:*limit], true
		}
		if e.opts.json {
			return e.writeHistoryJSON(h)
		}
		return e.printHistory(h)
	}
}

// history is a thread's checkpoints as read, printed one at a time: the
// tuples share the rows the saver read, and each checkpoint's values are
// built from them only when it is printed, so that history --values holds
// one checkpoint's values at a time and not the whole output.
type history struct {
	thread string
	head   string // the thread's head checkpoint
	values bool   // --values
	tps    []*checkpoint.Tuple
	more   bool // older checkpoints exist than --limit showed
	// nested returns a checkpoint's waiting paths down its subgraphs
	// (checkpointJSON.Waiting).
	nested func(tp *checkpoint.Tuple, in *checkpoint.Inspection) ([]string, error)
}

// entry returns what history prints of the i-th checkpoint, with its
// values when they were asked for. It fails when a stored checkpoint does
// not decode.
func (h *history) entry(i int) (checkpointJSON, error) {
	tp := h.tps[i]
	cp := tp.Checkpoint
	latest := cp.ID == h.head
	in, err := checkpoint.Inspect(tp, latest)
	if err != nil {
		return checkpointJSON{}, err
	}
	c := checkpointJSON{Checkpoint: cp.ID, Parent: cp.ParentID, Head: latest, Step: cp.Metadata.Step,
		Source: string(cp.Metadata.Source), RunKey: cp.Metadata.RunKey, Durability: durabilityOf(cp.Metadata), Next: nonNil(in.Next), CreatedAt: cp.CreatedAt.UTC()}
	if h.nested != nil && in.Status == "waiting" {
		if c.Waiting, err = h.nested(tp, in); err != nil {
			return checkpointJSON{}, err
		}
	}
	if h.values {
		v, err := compactJSON(in.Values)
		if err != nil {
			return checkpointJSON{}, fmt.Errorf("encode the values of thread %s at %s: %w", quote(h.thread), quote(cp.ID), err)
		}
		c.Values = json.RawMessage(v)
	}
	return c, nil
}

// entries returns every checkpoint's entry without its values: a first
// pass that finds a checkpoint that does not decode before anything is
// printed (so a failure prints no partial output) and that gives the
// table its column widths.
func (h *history) entries() ([]checkpointJSON, error) {
	out := make([]checkpointJSON, len(h.tps))
	for i := range h.tps {
		c, err := h.entry(i)
		if err != nil {
			return nil, err
		}
		c.Values = nil
		out[i] = c
	}
	return out, nil
}

// each calls fn with every checkpoint's entry, its values built just
// before and dropped after (fn must not keep them), and lets go of each
// tuple once it is printed.
func (h *history) each(cs []checkpointJSON, fn func(c checkpointJSON) error) error {
	for i, c := range cs {
		if h.values {
			full, err := h.entry(i)
			if err != nil {
				return err
			}
			c.Values = full.Values
		}
		h.tps[i] = nil
		if err := fn(c); err != nil {
			return err
		}
	}
	return nil
}

// writeHistoryJSON prints history --json as one indented JSON document,
// one checkpoint at a time:
//
//	{"thread": "…", "checkpoints": [checkpointJSON, …], "more": bool, "next_before": "…", "next_cursor": "…"}
//
// more says that older checkpoints exist than --limit showed; the next
// page is --before next_before, or --cursor next_cursor, the same
// checkpoint ID ("" when more is false).
func (e *env) writeHistoryJSON(h *history) error {
	cs, err := h.entries()
	if err != nil {
		return err
	}
	w := bufio.NewWriter(e.stdout)
	// Each piece is encoded as writeJSON would encode the document: two
	// spaces an indent, a checkpoint at depth 2, HTML not escaped.
	encode := func(prefix string, v any) error {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		enc.SetIndent(prefix, "  ")
		if err := enc.Encode(v); err != nil {
			return fmt.Errorf("encode output: %w", err)
		}
		_, err := w.Write(escapeJSON(bytes.TrimSuffix(b.Bytes(), []byte("\n"))))
		return err
	}
	io.WriteString(w, "{\n  \"thread\": ")
	if err := encode("", h.thread); err != nil {
		return err
	}
	io.WriteString(w, ",\n  \"checkpoints\": [")
	sep := "\n    "
	err = h.each(cs, func(c checkpointJSON) error {
		io.WriteString(w, sep)
		sep = ",\n    "
		return encode("    ", c)
	})
	if err != nil {
		return err
	}
	if len(cs) > 0 {
		io.WriteString(w, "\n  ")
	}
	next := ""
	if h.more {
		next = cs[len(cs)-1].Checkpoint
	}
	fmt.Fprintf(w, "],\n  \"more\": %t,\n  \"next_before\": ", h.more)
	if err := encode("", next); err != nil {
		return err
	}
	io.WriteString(w, ",\n  \"next_cursor\": ")
	if err := encode("", next); err != nil {
		return err
	}
	io.WriteString(w, "\n}\n")
	return w.Flush()
}

// printHistory prints history as a table. The columns before VALUES are
// aligned over all rows first; each row's values are then built, printed
// after its aligned cells and dropped.
func (e *env) printHistory(h *history) error {
	cs, err := h.entries()
	if err != nil {
		return err
	}
	if len(cs) == 0 {
		_, err := fmt.Fprintf(e.stdout, "no checkpoints of thread %s before the one given\n", quote(h.thread))
		return err
	}
	// The aligned columns of every row, each line ending where its
	// VALUES cell (the last, which does not take part in the alignment)
	// goes.
	var cells bytes.Buffer
	t := newTable(&cells)
	head := []string{"CHECKPOINT", "STEP", "SOURCE", "MODE", "NEXT", "CREATED"}
	if h.values {
		head = append(head, "VALUES")
	}
	t.row(head...)
	for _, c := range cs {
		id := c.Checkpoint
		if c.Head {
			id += " (head)"
		}
		source := c.Source
		if c.RunKey != "" {
			source += " (key " + quote(c.RunKey) + ")"
		}
		next := list(c.Next, previewNext)
		if len(c.Waiting) > 0 {
			next += " (waiting in " + list(c.Waiting, previewNext) + ")"
		}
		row := []string{id, strconv.Itoa(c.Step), source, c.Durability, next, formatTime(c.CreatedAt)}
		if h.values {
			row = append(row, "")
		}
		t.row(row...)
	}
	if err := t.flush(); err != nil {
		return err
	}
	w := bufio.NewWriter(e.stdout)
	line := func() []byte {
		l, _ := cells.ReadBytes('\n')
		return bytes.TrimSuffix(l, []byte("\n"))
	}
	w.Write(line())
	w.WriteString("\n")
	err = h.each(cs, func(c checkpointJSON) error {
		w.Write(line())
		if h.values {
			w.WriteString(clean(unescapeHTML(string(c.Values))))
		}
		_, err := w.WriteString("\n")
		return err
	})
	if err != nil {
		return err
	}
	if h.more {
		fmt.Fprintf(w, "older checkpoints: lockstep history %s --before %s\n", clean(shellArg(h.thread)), cs[len(cs)-1].Checkpoint)
	}
	return w.Flush()
}
