package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lockstepgo/lockstep/approval"
)

// approvalsJSON is the output of approvals --json.
type approvalsJSON struct {
	Approvals []approvalJSON `json:"approvals"`
	// More says that more approvals may follow than --limit showed;
	// NextCursor (--cursor, with the same filters) continues the listing
	// ("" after the last page).
	More       bool   `json:"more"`
	NextCursor string `json:"next_cursor"`
	// Expired counts the expired, undecided requests the listing read:
	// they are not listed, and their expiry (a rejection by
	// system:expiry) was recorded when ExpiryRecorded is true (the
	// database has approval tables and is writable to the user).
	Expired        int  `json:"expired"`
	ExpiryRecorded bool `json:"expiry_recorded"`
}

// approvalJSON is one pending approval: the request and where it waits.
type approvalJSON struct {
	ID         string          `json:"id"`
	Thread     string          `json:"thread"`
	Checkpoint string          `json:"checkpoint"`
	Node       string          `json:"node"`
	Tool       string          `json:"tool"`
	Args       json.RawMessage `json:"args"`
	ArgsHash   string          `json:"args_hash"`
	// Kind is what the reviewer is asked: gate (the model's call),
	// fallback (FallbackFor failed; this call would run instead) or
	// outcome_unknown (an earlier attempt may already have run).
	Kind        approval.Kind `json:"kind"`
	FallbackFor string        `json:"fallback_for,omitempty"`
	// Rationale is what the reviewer should read as the reason: the
	// model's (ModelRationale), or for outcome_unknown what that means and
	// what to check (the model wrote its rationale before the earlier
	// attempt).
	Rationale        string          `json:"rationale"`
	ModelRationale   string          `json:"model_rationale"`
	Context          json.RawMessage `json:"context"`
	Risk             string          `json:"risk"`
	Rule             string          `json:"rule"`
	Owner            string          `json:"owner"`
	Schema           json.RawMessage `json:"schema"`
	CreatedAt        time.Time       `json:"created_at"`
	ExpiresAt        time.Time       `json:"expires_at"`
	AgeSeconds       int64           `json:"age_seconds"`
	ExpiresInSeconds int64           `json:"expires_in_seconds"`
}

// durationFlag is a non-negative duration flag: a Go duration ("90s",
// "1h30m") or a number of days ("2d").
type durationFlag time.Duration

func (d *durationFlag) String() string { return time.Duration(*d).String() }

func (d *durationFlag) Set(s string) error {
	v, err := parseDuration(s)
	if err != nil {
		return err
	}
	*d = durationFlag(v)
	return nil
}

func parseDuration(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days < 0 || days > 3660 {
			return 0, fmt.Errorf("want a duration like 90s, 30m, 2h or 1d")
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("want a duration like 90s, 30m, 2h or 1d")
	}
	return v, nil
}

func approvalsCommand(fs *flag.FlagSet) runner {
	var f approval.Filter
	var older, expiring durationFlag
	fs.StringVar(&f.Tool, "tool", "", "only calls of `TOOL`")
	fs.StringVar(&f.Owner, "owner", "", "only requests owned by `OWNER`")
	fs.StringVar(&f.Thread, "thread", "", "only requests of `THREAD`")
	fs.Var(&older, "older-than", "only requests created at least `DURATION` ago (0: no filter)")
	fs.Var(&expiring, "expiring-within", "only requests that expire within `DURATION` (0: no filter)")
	fs.IntVar(&f.Limit, "limit", approval.DefaultPageSize, "show at most `N` approvals (0: all)")
	fs.StringVar(&f.Cursor, "cursor", "", "continue after the page that printed `CURSOR` (same filters)")
	return func(ctx context.Context, e *env, _ []string) error {
		if f.Limit < 0 {
			return usageError("approvals: --limit must be 0 (all) or more", "")
		}
		f.MinAge, f.ExpiringWithin = time.Duration(older), time.Duration(expiring)
		s, err := e.openSaver(false)
		if err != nil {
			return err
		}
		defer s.Close()
		store, durable, err := e.readDecisions(ctx, s)
		if err != nil {
			return err
		}
		page, err := listApprovals(ctx, approval.NewInbox(s, store), f)
		if err != nil {
			return err // a bad cursor is an approval.ErrInvalidFilter: a usage error
		}
		now := e.now()
		out := approvalsJSON{Approvals: []approvalJSON{}, More: page.Next != "", NextCursor: page.Next, Expired: page.Expired, ExpiryRecorded: durable && page.Expired > 0}
		for _, it := range page.Items {
			r := it.Request
			kind := r.Kind
			if kind == "" {
				kind = approval.KindGate
			}
			out.Approvals = append(out.Approvals, approvalJSON{ID: it.ID, Thread: it.Thread, Checkpoint: it.Checkpoint, Node: it.Node,
				Tool: r.Tool, Args: r.Args, ArgsHash: r.ArgsHash, Kind: kind, FallbackFor: r.FallbackFor,
				Rationale: r.Explanation(), ModelRationale: r.Rationale, Context: r.Context, Risk: string(r.Risk),
				Rule: r.Rule, Owner: r.Owner, Schema: r.Schema, CreatedAt: r.CreatedAt.UTC(), ExpiresAt: r.ExpiresAt.UTC(),
				AgeSeconds: int64(now.Sub(r.CreatedAt) / time.Second), ExpiresInSeconds: int64(r.ExpiresAt.Sub(now) / time.Second)})
		}
		if e.opts.json {
			return e.writeJSON(out)
		}
		return e.printApprovals(out, f)
	}
}

func (e *env) printApprovals(out approvalsJSON, f approval.Filter) error {
	w := e.stdout
	if len(out.Approvals) > 0 {
		t := newTable(w)
		t.row("ID", "TOOL", "THREAD", "ARGS", "RULE", "RATIONALE", "RISK", "OWNER", "AGE", "EXPIRES IN")
		unknown := 0
		for _, a := range out.Approvals {
			owner, rule, why := a.Owner, a.Rule, a.Rationale
			if owner == "" {
				owner = "-"
			}
			if rule == "" {
				rule = "-"
			}
			if a.Kind == approval.KindOutcomeUnknown {
				why = approval.OutcomeUnknownShort
				unknown++
			}
			t.row(a.ID, a.Tool, a.Thread, preview(a.Args, previewArgs), rule, truncate(clean(why), previewRationale),
				a.Risk, owner, formatAge(time.Duration(a.AgeSeconds)*time.Second), formatAge(time.Duration(a.ExpiresInSeconds)*time.Second))
		}
		if err := t.flush(); err != nil {
			return err
		}
		if unknown > 0 {
			if _, err := fmt.Fprintf(w, "outcome_unknown (%d above): %s\n", unknown, approval.OutcomeUnknownNote); err != nil {
				return err
			}
		}
	} else if out.NextCursor == "" {
		msg := "no pending approvals"
		if f.Cursor != "" {
			msg = "no more pending approvals"
		}
		if _, err := fmt.Fprintln(w, msg); err != nil {
			return err
		}
	}
	if out.Expired > 0 {
		msg := fmt.Sprintf("%d expired request(s) not listed: recorded as rejected (expired, by %s); a process running approval.Worker gives the agent the rejection",
			out.Expired, approval.ExpiryReviewer)
		switch {
		case out.ExpiryRecorded:
		case e.readOnly:
			msg = fmt.Sprintf("%d expired request(s) not listed: an expired request is rejected (not recorded here: %s is read-only to you; the application's expiry sweeper records it)",
				out.Expired, e.dbName())
		default:
			msg = fmt.Sprintf("%d expired request(s) not listed: an expired request is rejected (not recorded here: %s has no approval tables yet; the application's expiry sweeper records it)",
				out.Expired, e.dbName())
		}
		if _, err := fmt.Fprintln(w, msg); err != nil {
			return err
		}
	}
	if out.NextCursor != "" {
		if _, err := fmt.Fprintf(w, "next page: lockstep approvals%s --cursor %s\n", clean(filterArgs(f)), out.NextCursor); err != nil {
			return err
		}
	}
	if len(out.Approvals) > 0 {
		_, err := fmt.Fprintln(w, "decide with: lockstep approve ID --reviewer NAME [--note TEXT] [--args JSON], or lockstep reject ID --reviewer NAME [--note TEXT]")
		return err
	}
	return nil
}

// listApprovals lists f.Limit approvals (0: all) from f.Cursor on, in as
// many of the inbox's pages (at most approval.MaxPageSize each) as that
// takes: a page may be short while more follow. It returns them as one
// page, with the cursor after the last one and the count of expired
// requests all the pages read.
func listApprovals(ctx context.Context, in *approval.Inbox, f approval.Filter) (approval.Page, error) {
	var all approval.Page
	want := f.Limit
	for {
		f.Limit = approval.MaxPageSize
		if want > 0 {
			f.Limit = min(want-len(all.Items), approval.MaxPageSize)
		}
		p, err := in.List(ctx, f)
		if err != nil {
			return approval.Page{}, err
		}
		all.Items, all.Next, all.Expired = append(all.Items, p.Items...), p.Next, all.Expired+p.Expired
		if p.Next == "" || want > 0 && len(all.Items) >= want {
			return all, nil
		}
		f.Cursor = p.Next
	}
}

// filterArgs writes the flags that select f's approvals (not the cursor),
// for the command that shows the next page.
func filterArgs(f approval.Filter) string {
	var b strings.Builder
	for _, p := range []struct{ flag, value string }{{"tool", f.Tool}, {"owner", f.Owner}, {"thread", f.Thread}} {
		if p.value != "" {
			fmt.Fprintf(&b, " --%s %s", p.flag, shellArg(p.value))
		}
	}
	if f.MinAge > 0 {
		fmt.Fprintf(&b, " --older-than %s", f.MinAge)
	}
	if f.ExpiringWithin > 0 {
		fmt.Fprintf(&b, " --expiring-within %s", f.ExpiringWithin)
	}
	if f.Limit != approval.DefaultPageSize {
		fmt.Fprintf(&b, " --limit %d", f.Limit)
	}
	return b.String()
}
