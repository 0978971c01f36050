package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// threadJSON is one thread in the output of threads --json.
type threadJSON struct {
	Thread            string    `json:"thread"`
	Status            string    `json:"status"` // done, waiting, failed, pending; "unreadable" with error
	Next              []string  `json:"next"`
	PendingInterrupts int       `json:"pending_interrupts"`
	Head              string    `json:"head"`
	Step              int       `json:"step"`
	Source            string    `json:"source"`
	HeadCreatedAt     time.Time `json:"head_created_at"`
	UpdatedAt         time.Time `json:"updated_at"`
	Error             string    `json:"error,omitempty"`
}

// threadsJSON is the output of threads --json.
type threadsJSON struct {
	Threads []threadJSON `json:"threads"`
	// More says that more threads exist than --limit showed.
	More bool `json:"more"`
}

const statusUnreadable = "unreadable"

func threadsCommand(fs *flag.FlagSet) runner {
	limit := fs.Int("limit", 50, "show at most `N` threads (0: all)")
	return func(ctx context.Context, e *env, _ []string) error {
		if *limit < 0 {
			return usageError("threads: --limit must be 0 (all) or more", "")
		}
		s, err := e.openSaver(false)
		if err != nil {
			return err
		}
		defer s.Close()
		ask := 0
		if *limit > 0 {
			ask = *limit + 1
		}
		infos, err := s.Threads(ctx, 0, ask)
		if err != nil {
			return fmt.Errorf("list threads: %w", err)
		}
		out := threadsJSON{Threads: []threadJSON{}}
		if *limit > 0 && len(infos) > *limit {
			infos, out.More = infos[:*limit], true
		}
		unreadable := 0
		for _, ti := range infos {
			row, err := inspectThread(ctx, s, ti)
			if errors.Is(err, checkpoint.ErrNotFound) {
				continue // deleted since it was listed
			}
			if err != nil {
				unreadable++
			}
			out.Threads = append(out.Threads, row)
		}
		if e.opts.json {
			err = e.writeJSON(out)
		} else {
			err = e.printThreads(out)
		}
		if err != nil {
			return err
		}
		if unreadable > 0 {
			return &failure{code: exitInternal, kind: kindInternal, msg: fmt.Sprintf("%d thread(s) could not be read (status %s)", unreadable, statusUnreadable),
				hint: "run `lockstep state THREAD` on them for the error", written: e.opts.json}
		}
		return nil
	}
}

// inspectThread reads the head of a listed thread and its status. On a
// read error it returns the row marked unreadable, and the error.
func inspectThread(ctx context.Context, s checkpoint.Saver, ti checkpoint.ThreadInfo) (threadJSON, error) {
	row := threadJSON{Thread: ti.Thread, Head: ti.Head, Step: ti.Step, Source: string(ti.Source),
		UpdatedAt: ti.UpdatedAt.UTC(), Next: []string{}}
	tp, err := s.Get(ctx, checkpoint.Ref{Thread: ti.Thread}, checkpoint.GetOptions{})
	if err == nil {
		var in *checkpoint.Inspection
		if in, err = checkpoint.Inspect(tp, true); err == nil {
			cp := tp.Checkpoint
			row.Head, row.Step, row.Source, row.HeadCreatedAt = cp.ID, cp.Metadata.Step, string(cp.Metadata.Source), cp.CreatedAt.UTC()
			row.Status, row.Next, row.PendingInterrupts = in.Status, nonNil(in.Next), len(in.Interrupts)
			return row, nil
		}
	}
	row.Status, row.Error = statusUnreadable, err.Error()
	return row, err
}

func (e *env) printThreads(out threadsJSON) error {
	if len(out.Threads) == 0 {
		_, err := fmt.Fprintf(e.stdout, "no threads in %s\n", e.opts.db)
		return err
	}
	t := newTable(e.stdout)
	t.row("THREAD", "STATUS", "STEP", "NEXT", "HEAD", "UPDATED")
	now := e.now()
	for _, r := range out.Threads {
		t.row(r.Thread, r.Status, strconv.Itoa(r.Step), list(r.Next, previewNext), r.Head, formatAge(now.Sub(r.UpdatedAt))+" ago")
	}
	if err := t.flush(); err != nil {
		return err
	}
	if out.More {
		_, err := fmt.Fprintf(e.stdout, "showing the %d most recently updated threads: pass --limit 0 for all\n", len(out.Threads))
		return err
	}
	return nil
}
