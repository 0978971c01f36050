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
	// ErrorKind classifies Error as a failing command's kind does:
	// corrupt for stored data that does not verify, else internal.
	ErrorKind string `json:"error_kind,omitempty"`
}

// threadsJSON is the output of threads --json.
type threadsJSON struct {
	Threads []threadJSON `json:"threads"`
	// More says that more threads exist than --limit showed; NextCursor
	// (--cursor) continues after the last one ("" when More is false).
	More       bool   `json:"more"`
	NextCursor string `json:"next_cursor"`
}

const statusUnreadable = "unreadable"

func threadsCommand(fs *flag.FlagSet) runner {
	limit := fs.Int("limit", 50, "show at most `N` threads (0: all)")
	cursor := fs.String("cursor", "", "continue after the page that printed `CURSOR`")
	return func(ctx context.Context, e *env, _ []string) error {
		if *limit < 0 {
			return usageError("threads: --limit must be 0 (all) or more", "")
		}
		var after *threadCursor
		if *cursor != "" {
			c, err := parseThreadCursor(*cursor)
			if err != nil {
				f := usageError(fmt.Sprintf("threads: --cursor %s: %v", quote(*cursor), err), "pass the next_cursor a threads listing printed (the line below its table)")
				f.err = err
				return f
			}
			after = &c
		}
		s, err := e.openSaver(false)
		if err != nil {
			return err
		}
		defer s.Close()
		page, err := listThreads(ctx, s, after, *limit)
		if err != nil {
			return fmt.Errorf("list threads: %w", err)
		}
		out := threadsJSON{Threads: []threadJSON{}, More: page.next != "", NextCursor: page.next}
		infos := page.threads
		unreadable, corrupt := 0, 0
		for _, ti := range infos {
			row, err := inspectThread(ctx, s, ti)
			if errors.Is(err, checkpoint.ErrNotFound) {
				continue // deleted since it was listed
			}
			if err != nil {
				unreadable++
			}
			if row.ErrorKind == kindCorrupt {
				corrupt++
			}
			out.Threads = append(out.Threads, row)
		}
		if e.opts.json {
			err = e.writeJSON(out)
		} else {
			err = e.printThreads(out, after != nil)
		}
		if err != nil {
			return err
		}
		switch {
		case corrupt > 0:
			// A row that does not verify is the kind scripts act on
			// (restore, inspect), whatever else failed.
			return &failure{code: exitInternal, kind: kindCorrupt, msg: fmt.Sprintf("%d thread(s) could not be read (status %s), %d of them because stored data does not verify", unreadable, statusUnreadable, corrupt),
				hint: "run `lockstep state THREAD` on them for the error; inspect the rows with the sqlite3 shell or restore the file from a backup", written: e.opts.json}
		case unreadable > 0:
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
	row.Status, row.Error, row.ErrorKind = statusUnreadable, err.Error(), explain(err).kind
	return row, err
}

func (e *env) printThreads(out threadsJSON, continued bool) error {
	if len(out.Threads) == 0 {
		msg := "no threads in %s\n"
		if continued {
			msg = "no more threads in %s\n"
		}
		_, err := fmt.Fprintf(e.stdout, msg, e.dbName())
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
		_, err := fmt.Fprintf(e.stdout, "showing the %d most recently updated threads: next page: lockstep threads%s --cursor %s (or --limit 0 for all)\n",
			len(out.Threads), limitArg(len(out.Threads), 50), out.NextCursor)
		return err
	}
	return nil
}

// limitArg is the --limit flag that repeats a page of n entries, "" when n
// is the default def.
func limitArg(n, def int) string {
	if n == def {
		return ""
	}
	return " --limit " + strconv.Itoa(n)
}
