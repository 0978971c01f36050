package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// Every listing (threads, history, approvals) pages the same way: --limit N
// shows at most N entries (0: all of them), and a listing cut short says
// so ("more": true in JSON) and gives the cursor that continues it
// ("next_cursor"; --cursor takes it back, with the same filters).

// errBadCursor is the cause of a --cursor that no listing printed.
var errBadCursor = errors.New("not a cursor this listing printed")

// threadCursorPrefix starts a threads cursor (its format's version).
const threadCursorPrefix = "t1_"

// threadCursor is where a threads listing continues: after the thread it
// names, as it stood (its last update) when the page was listed, in the
// listing's order (most recently updated first, ties by thread name).
// Threads updated since the page was listed have moved above it and are
// not repeated; none that stayed is skipped. offset is where the thread
// was, a hint that makes the next read start near it.
type threadCursor struct {
	offset  int
	updated time.Time
	thread  string
}

// String encodes the cursor: the prefix, the offset, the update time
// (RFC 3339, nanoseconds) and the thread (base64url), joined by "_",
// every character safe in a shell word.
func (c threadCursor) String() string {
	return threadCursorPrefix + strconv.Itoa(c.offset) + "_" + c.updated.UTC().Format(time.RFC3339Nano) + "_" +
		base64.RawURLEncoding.EncodeToString([]byte(c.thread))
}

// parseThreadCursor decodes a cursor threads printed. It returns an error
// wrapping errBadCursor for anything else.
func parseThreadCursor(s string) (threadCursor, error) {
	rest, ok := strings.CutPrefix(s, threadCursorPrefix)
	parts := strings.SplitN(rest, "_", 3)
	if !ok || len(parts) != 3 {
		return threadCursor{}, fmt.Errorf("%w", errBadCursor)
	}
	off, err := strconv.Atoi(parts[0])
	if err != nil || off < 0 {
		return threadCursor{}, fmt.Errorf("%w: bad offset", errBadCursor)
	}
	updated, err := time.Parse(time.RFC3339Nano, parts[1])
	if err != nil {
		return threadCursor{}, fmt.Errorf("%w: bad time", errBadCursor)
	}
	thread, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || len(thread) == 0 {
		return threadCursor{}, fmt.Errorf("%w: bad thread", errBadCursor)
	}
	return threadCursor{offset: off, updated: updated, thread: string(thread)}, nil
}

// reached reports whether ti is listed at or before the cursor's thread.
func (c threadCursor) reached(ti checkpoint.ThreadInfo) bool {
	if !ti.UpdatedAt.Equal(c.updated) {
		return ti.UpdatedAt.After(c.updated)
	}
	return ti.Thread <= c.thread
}

// threadPage is a page of a threads listing: the threads, and the cursor
// that continues after them ("" when the listing is complete).
type threadPage struct {
	threads []checkpoint.ThreadInfo
	next    string
}

// listThreads returns at most limit threads (0: all) listed after the
// cursor (nil: from the start), reading the saver's offset-based listing
// in chunks near the cursor's offset.
func listThreads(ctx context.Context, s checkpoint.ThreadLister, after *threadCursor, limit int) (threadPage, error) {
	// chunk is how many threads one read asks for: one more than the page
	// (to know whether more exist), and the cursor's own thread.
	chunk := 0
	if limit > 0 {
		chunk = limit + 2
	}
	start := 0
	if after != nil {
		// Align: the first thread read must be at or before the cursor,
		// or threads deleted since moved unseen ones above the offset.
		start = after.offset
		back := max(chunk, 64)
		for start > 0 {
			tis, err := s.Threads(ctx, start, 1)
			if err != nil {
				return threadPage{}, err
			}
			if len(tis) == 1 && after.reached(tis[0]) {
				break
			}
			start = max(start-back, 0)
			back *= 2
		}
	}
	var out []checkpoint.ThreadInfo
	var offsets []int
	for {
		tis, err := s.Threads(ctx, start, chunk)
		if err != nil {
			return threadPage{}, err
		}
		for i, ti := range tis {
			if after != nil && after.reached(ti) {
				continue
			}
			out, offsets = append(out, ti), append(offsets, start+i)
		}
		if chunk == 0 || len(tis) < chunk || len(out) > limit {
			break
		}
		start += len(tis)
	}
	page := threadPage{threads: out}
	if limit > 0 && len(out) > limit {
		last := out[limit-1]
		page.threads = out[:limit]
		page.next = threadCursor{offset: offsets[limit-1], updated: last.UpdatedAt, thread: last.Thread}.String()
	}
	return page, nil
}
