package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// listing is what every listing's --json has in common: its entries (by
// name), whether more follow and the cursor that continues it.
type listing struct {
	entries    []string
	more       bool
	nextCursor string
}

// listingCommands are the listing commands, each with what names its
// entries in its JSON output.
var listingCommands = []struct {
	name  string
	args  []string // the command and its arguments before the paging flags
	field string   // the array of entries
	key   string   // the field naming an entry
}{
	{"threads", []string{"threads"}, "threads", "thread"},
	{"history", []string{"history", threadRefund}, "checkpoints", "checkpoint"},
	{"approvals", []string{"approvals"}, "approvals", "id"},
}

// runListing runs a listing command with --json and extra flags, and
// decodes its output.
func runListing(t *testing.T, db string, now time.Time, args []string, field, key string) listing {
	t.Helper()
	got := cli(db, now, append([]string{"--json"}, args...)...)
	if got.code != exitOK {
		t.Fatalf("%v: exit %d: %s%s", args, got.code, got.stdout, got.stderr)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal([]byte(got.stdout), &doc); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, got.stdout)
	}
	var l listing
	var entries []map[string]any
	for name, v := range map[string]any{field: &entries, "more": &l.more, "next_cursor": &l.nextCursor} {
		raw, ok := doc[name]
		if !ok {
			t.Fatalf("%v: the JSON output has no %q:\n%s", args, name, got.stdout)
		}
		if err := json.Unmarshal(raw, v); err != nil {
			t.Fatalf("%v: %s: %v", args, name, err)
		}
	}
	for _, e := range entries {
		l.entries = append(l.entries, fmt.Sprint(e[key]))
	}
	return l
}

// TestListingsPage (issue 17): every listing means the same by --limit 0
// (all of them: before, approvals refused it as a usage error), says when
// it was cut short ("more") and gives the cursor that continues it
// ("next_cursor", taken back by --cursor: before, threads said "more":
// true and gave nothing to continue from). Paging through one entry at a
// time lists exactly what --limit 0 lists, each entry once.
func TestListingsPage(t *testing.T) {
	f := buildFixture(t)
	db := f.copyDB(t)
	now := cliNow()
	for _, lc := range listingCommands {
		t.Run(lc.name, func(t *testing.T) {
			all := runListing(t, db, now, append(slices.Clone(lc.args), "--limit", "0"), lc.field, lc.key)
			if len(all.entries) < 2 || all.more || all.nextCursor != "" {
				t.Fatalf("--limit 0 = %+v, want every entry (at least 2) and no more", all)
			}
			var paged []string
			cursor := ""
			for page := 0; ; page++ {
				if page > len(all.entries) {
					t.Fatalf("paging did not end after %d pages: %v", page, paged)
				}
				args := append(slices.Clone(lc.args), "--limit", "1")
				if cursor != "" {
					args = append(args, "--cursor", cursor)
				}
				l := runListing(t, db, now, args, lc.field, lc.key)
				if l.more != (l.nextCursor != "") {
					t.Fatalf("page %d: more %t with next_cursor %q", page, l.more, l.nextCursor)
				}
				if len(l.entries) > 1 {
					t.Fatalf("page %d: %d entries with --limit 1", page, len(l.entries))
				}
				paged = append(paged, l.entries...)
				if !l.more {
					break
				}
				cursor = l.nextCursor
			}
			if d := cmp.Diff(all.entries, paged); d != "" {
				t.Errorf("paging one at a time differs from --limit 0 (-all +paged):\n%s", d)
			}
			// The table says how to continue, with the cursor.
			got := cli(db, now, append(slices.Clone(lc.args), "--limit", "1")...)
			if got.code != exitOK || !strings.Contains(got.stdout, " --cursor ") && !strings.Contains(got.stdout, " --before ") {
				t.Errorf("the table of a page cut short names no cursor: exit %d:\n%s%s", got.code, got.stdout, got.stderr)
			}
		})
	}
}

// TestListingsRefuseBadPaging: a negative --limit and a cursor the
// listing never printed are usage errors, for every listing.
func TestListingsRefuseBadPaging(t *testing.T) {
	f := buildFixture(t)
	for _, lc := range listingCommands {
		for _, extra := range [][]string{{"--limit", "-1"}, {"--cursor", "nonsense"}} {
			args := append(append(slices.Clone(lc.args), extra...), "--json")
			got := cli(f.path, cliNow(), args...)
			want := exitUsage
			if lc.name == "history" && extra[0] == "--cursor" {
				want = exitNotFound // the cursor is a checkpoint ID: this one is unknown
			}
			if got.code != want {
				t.Errorf("%v: exit %d, want %d: %s", args, got.code, want, got.stderr)
			}
		}
	}
}

// fakeThreads is a ThreadLister over a list kept in the listing's order.
type fakeThreads struct{ list []checkpoint.ThreadInfo }

func (f *fakeThreads) Threads(_ context.Context, offset, limit int) ([]checkpoint.ThreadInfo, error) {
	if offset >= len(f.list) {
		return nil, nil
	}
	out := f.list[offset:]
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return slices.Clone(out), nil
}

func (f *fakeThreads) sort() {
	slices.SortFunc(f.list, func(a, b checkpoint.ThreadInfo) int {
		if c := b.UpdatedAt.Compare(a.UpdatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.Thread, b.Thread)
	})
}

func (f *fakeThreads) update(thread string, at time.Time) {
	for i := range f.list {
		if f.list[i].Thread == thread {
			f.list[i].UpdatedAt = at
		}
	}
	f.sort()
}

func (f *fakeThreads) remove(threads ...string) {
	f.list = slices.DeleteFunc(f.list, func(ti checkpoint.ThreadInfo) bool { return slices.Contains(threads, ti.Thread) })
}

// TestThreadsCursorAcrossChanges: a threads cursor continues after the
// thread it names, as it stood when its page was listed, whatever
// happened to the listing since: threads deleted above it (the offsets
// shift down), threads updated (they move to the top) or created, and
// threads with the same update time (ties by name). No thread that stayed
// as it was is skipped, and none is listed twice.
func TestThreadsCursorAcrossChanges(t *testing.T) {
	base := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	newList := func() *fakeThreads {
		f := &fakeThreads{}
		for i := range 100 {
			// Pairs of threads share an update time.
			f.list = append(f.list, checkpoint.ThreadInfo{Thread: fmt.Sprintf("t%03d", i), UpdatedAt: base.Add(time.Duration(i/2) * time.Second)})
		}
		f.sort()
		return f
	}
	names := func(tis []checkpoint.ThreadInfo) []string {
		var out []string
		for _, ti := range tis {
			out = append(out, ti.Thread)
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		change func(f *fakeThreads, seen []string)
		// gone are the threads that, changed, are no longer due after the
		// cursor: deleted, or updated (moved above it).
		gone []string
	}{
		{name: "unchanged"},
		{name: "deleted above the cursor", change: func(f *fakeThreads, seen []string) { f.remove(seen[:15]...) }},
		{name: "all above deleted", change: func(f *fakeThreads, seen []string) { f.remove(seen...) }},
		{name: "deleted below the cursor", change: func(f *fakeThreads, _ []string) { f.remove("t050", "t051") }, gone: []string{"t050", "t051"}},
		{name: "updated below the cursor", change: func(f *fakeThreads, _ []string) { f.update("t040", base.Add(time.Hour)) }, gone: []string{"t040"}},
		{name: "updated above the cursor", change: func(f *fakeThreads, seen []string) { f.update(seen[3], base.Add(time.Hour)) }},
		{name: "created", change: func(f *fakeThreads, _ []string) {
			for i := range 30 {
				f.list = append(f.list, checkpoint.ThreadInfo{Thread: fmt.Sprintf("new%02d", i), UpdatedAt: base.Add(time.Hour)})
			}
			f.sort()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			f := newList()
			want := names(f.list)
			first, err := listThreads(ctx, f, nil, 21) // the cursor falls inside a tie
			if err != nil || first.next == "" {
				t.Fatalf("first page: %v, next %q", err, first.next)
			}
			seen := names(first.threads)
			if d := cmp.Diff(want[:21], seen); d != "" {
				t.Fatalf("first page (-want +got):\n%s", d)
			}
			if tc.change != nil {
				tc.change(f, seen)
			}
			c, err := parseThreadCursor(first.next)
			if err != nil {
				t.Fatal(err)
			}
			var rest []string
			for p := 0; ; p++ {
				if p > 100 {
					t.Fatal("paging does not end")
				}
				page, err := listThreads(ctx, f, &c, 7)
				if err != nil {
					t.Fatal(err)
				}
				rest = append(rest, names(page.threads)...)
				if page.next == "" {
					break
				}
				if c, err = parseThreadCursor(page.next); err != nil {
					t.Fatal(err)
				}
			}
			wantRest := slices.DeleteFunc(slices.Clone(want[21:]), func(s string) bool { return slices.Contains(tc.gone, s) })
			if d := cmp.Diff(wantRest, rest); d != "" {
				t.Errorf("the pages after the cursor (-want +got):\n%s", d)
			}
		})
	}
}

// TestThreadCursorFormat: a cursor round-trips, and what threads never
// printed is refused with errBadCursor.
func TestThreadCursorFormat(t *testing.T) {
	c := threadCursor{offset: 12, updated: time.Date(2026, 3, 2, 9, 0, 0, 123456789, time.UTC), thread: "a_b c/é"}
	got, err := parseThreadCursor(c.String())
	if err != nil || got.offset != c.offset || !got.updated.Equal(c.updated) || got.thread != c.thread {
		t.Errorf("round trip of %q = %+v, %v", c.String(), got, err)
	}
	if s := c.String(); s != shellArg(s) {
		t.Errorf("cursor %q needs quoting in a shell", s)
	}
	for _, bad := range []string{"", "nonsense", "t1_", "t1_x_2026-03-02T09:00:00Z_YQ", "t1_-1_2026-03-02T09:00:00Z_YQ",
		"t1_1_yesterday_YQ", "t1_1_2026-03-02T09:00:00Z_", "t1_1_2026-03-02T09:00:00Z_!!", "c1.abc"} {
		if _, err := parseThreadCursor(bad); !errors.Is(err, errBadCursor) {
			t.Errorf("parseThreadCursor(%q) = %v, want errBadCursor", bad, err)
		}
	}
}
