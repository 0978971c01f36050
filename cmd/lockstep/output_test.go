package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/nodes/ledger"
)

func TestFormatAge(t *testing.T) {
	cases := []struct {
		d    time.Duration
		want string
	}{
		{-time.Hour, "0s"},
		{0, "0s"},
		{999 * time.Millisecond, "0s"},
		{45 * time.Second, "45s"},
		{time.Minute, "1m00s"},
		{3*time.Minute + 12*time.Second + 800*time.Millisecond, "3m12s"},
		{59*time.Minute + 59*time.Second, "59m59s"},
		{2*time.Hour + 5*time.Minute + 59*time.Second, "2h05m"},
		{23*time.Hour + 59*time.Minute, "23h59m"},
		{24 * time.Hour, "1d00h"},
		{3*24*time.Hour + 4*time.Hour + 30*time.Minute, "3d04h"},
	}
	for _, tc := range cases {
		if got := formatAge(tc.d); got != tc.want {
			t.Errorf("formatAge(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

func TestClean(t *testing.T) {
	cases := []struct{ in, want string }{
		{"plain text, ünïcode → ok", "plain text, ünïcode → ok"},
		{"\x1b[31mred\x1b[0m", `\u001b[31mred\u001b[0m`},
		{"line\nbreak\ttab", `line\nbreak\ttab`},
		{"c1 \u009b2J csi", `c1 \u009b2J csi`},
		{"bidi \u202egnp.exe", `bidi \u202egnp.exe`},
		{"bad \xff utf8", `bad \xff utf8`},
		{"del \x7f", `del \u007f`},
	}
	for _, tc := range cases {
		if got := clean(tc.in); got != tc.want {
			t.Errorf("clean(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestTruncate(t *testing.T) {
	cases := []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"eleven char", 10, "eleven ch…"},
		{"ünïcödé ünïcödé", 8, "ünïcödé…"},
	}
	for _, tc := range cases {
		if got := truncate(tc.in, tc.n); got != tc.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestUnescapeHTML(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{"a":"\u003cb\u003e \u0026 \u003C/b\u003E"}`, `{"a":"<b> & </b>"}`},
		{`{"a":"\\u003c stays"}`, `{"a":"\\u003c stays"}`},       // an escaped backslash, then text
		{`{"a":"\u001b \u2028 \n"}`, `{"a":"\u001b \u2028 \n"}`}, // other escapes stay
		{`"trailing \`, `"trailing \`},
	}
	for _, tc := range cases {
		if got := unescapeHTML(tc.in); got != tc.want {
			t.Errorf("unescapeHTML(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// TestJSONOutputEscapes: what a terminal would interpret is escaped in
// JSON output, and the document still decodes to the same data.
func TestJSONOutputEscapes(t *testing.T) {
	var out strings.Builder
	e := &env{stdout: &out}
	in := map[string]string{"v": "esc \x1b c1 \u009b bidi \u202e del \x7f <b>"}
	if err := e.writeJSON(in); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsFunc(out.String(), func(r rune) bool { return unsafeRune(r) && r != '\n' }) {
		t.Errorf("unsafe characters in %q", out.String())
	}
	if !strings.Contains(out.String(), "<b>") {
		t.Errorf("HTML characters were escaped: %s", out.String())
	}
	var back map[string]string
	if err := json.Unmarshal([]byte(out.String()), &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, back); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestShellArg(t *testing.T) {
	cases := []struct{ in, want string }{
		{"refund-7", "refund-7"},
		{"user@example.com/t:1", "user@example.com/t:1"},
		{"two words", "'two words'"},
		{"it's", `'it'\''s'`},
		{"$(rm -rf)", "'$(rm -rf)'"},
		{"", "''"},
	}
	for _, tc := range cases {
		if got := shellArg(tc.in); got != tc.want {
			t.Errorf("shellArg(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestParseDuration(t *testing.T) {
	cases := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"90s", 90 * time.Second, true},
		{"1h30m", 90 * time.Minute, true},
		{"2d", 48 * time.Hour, true},
		{"0", 0, true},
		{"-5m", 0, false},
		{"-1d", 0, false},
		{"soon", 0, false},
		{"1.5d", 0, false},
		{"", 0, false},
	}
	for _, tc := range cases {
		got, err := parseDuration(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestParseInterleaved(t *testing.T) {
	cases := []struct {
		args     []string
		wantPos  []string
		wantJSON bool
		wantNote string
	}{
		{[]string{"t1"}, []string{"t1"}, false, ""},
		{[]string{"t1", "--json"}, []string{"t1"}, true, ""},
		{[]string{"--json", "t1", "--note", "x y"}, []string{"t1"}, true, "x y"},
		{[]string{"t1", "--", "--json"}, []string{"t1", "--json"}, false, ""},
		{[]string{"--", "-x", "--json"}, []string{"-x", "--json"}, false, ""},
		{nil, nil, false, ""},
	}
	for _, tc := range cases {
		fs := newFlagSet("test")
		j := fs.Bool("json", false, "")
		note := fs.String("note", "", "")
		pos, err := parseInterleaved(fs, tc.args)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if diff := cmp.Diff(tc.wantPos, pos); diff != "" || *j != tc.wantJSON || *note != tc.wantNote {
			t.Errorf("%v: positional %v json=%v note=%q; want %v %v %q", tc.args, pos, *j, *note, tc.wantPos, tc.wantJSON, tc.wantNote)
		}
	}
	fs := newFlagSet("test")
	if _, err := parseInterleaved(fs, []string{"t1", "--nope"}); err == nil {
		t.Error("an unknown flag after an argument was accepted")
	}
}

// TestExplain maps the library's errors to exit codes and kinds by type,
// however they are wrapped.
func TestExplain(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("context: %w", err) }
	cases := []struct {
		name string
		err  error
		code int
		kind string
	}{
		{"already decided", wrap(&approval.AlreadyDecidedError{ID: "a1", Winner: approval.Decision{Outcome: approval.Approved, Reviewer: "alice"}}), exitRefused, kindAlreadyDecided},
		{"swept", &approval.AlreadyDecidedError{ID: "a1", Winner: approval.Decision{Outcome: approval.Expired, Reviewer: approval.ExpiryReviewer}}, exitRefused, kindAlreadyDecided},
		{"expired", wrap(&approval.Error{ID: "a1", Kind: approval.ErrExpired, Reason: "expired at noon"}), exitRefused, kindExpired},
		{"invalid args", &approval.Error{ID: "a1", Kind: approval.ErrInvalidArgs, Reason: "$.x"}, exitRefused, kindInvalidArgs},
		{"invalid decision", &approval.Error{ID: "a1", Kind: approval.ErrInvalidDecision}, exitRefused, kindInvalidDecision},
		{"invalid request", &approval.Error{ID: "a1", Kind: approval.ErrInvalidRequest}, exitRefused, kindInvalidRequest},
		{"invalid expiry", &approval.Error{ID: "a1", Kind: approval.ErrInvalidExpiry}, exitRefused, kindInvalidRequest},
		{"approval not found", &approval.Error{ID: "a1", Kind: approval.ErrNotFound}, exitNotFound, kindNotFound},
		{"bad cursor", &approval.Error{Kind: approval.ErrInvalidFilter, Reason: "malformed cursor"}, exitUsage, kindUsage},
		{"thread not found", wrap(checkpoint.ErrNotFound), exitNotFound, kindNotFound},
		{"empty thread", wrap(checkpoint.ErrInvalid), exitUsage, kindUsage},
		{"corrupt checkpoint", &checkpoint.CorruptError{Thread: "t", What: "blob", Err: errors.New("crc")}, exitInternal, kindCorrupt},
		{"corrupt approval", wrap(&approval.CorruptError{ID: "a1", What: "decision", Err: errors.New("crc")}), exitInternal, kindCorrupt},
		{"corrupt ledger record", wrap(&ledger.CorruptError{Key: "k", What: "record", Err: errors.New("crc")}), exitInternal, kindCorrupt},
		{"schema", wrap(approval.ErrSchemaVersion), exitInternal, kindInternal},
		{"cancelled", wrap(context.Canceled), exitInternal, kindInternal},
		{"anything else", os.ErrPermission, exitInternal, kindInternal},
		{"usage", usageError("bad", ""), exitUsage, kindUsage},
	}
	for _, tc := range cases {
		f := explain(tc.err)
		if f.code != tc.code || f.kind != tc.kind || f.msg == "" {
			t.Errorf("%s: explain(%v) = code %d kind %q msg %q; want %d %q", tc.name, tc.err, f.code, f.kind, f.msg, tc.code, tc.kind)
		}
		if f.err != nil && !errors.Is(f, tc.err) {
			t.Errorf("%s: the failure does not wrap its cause", tc.name)
		}
	}
}

// TestDocumentation: the package documentation and lockstep help describe
// every command and every exit code.
func TestDocumentation(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var help strings.Builder
	(&env{stdout: &help}).usage(&help)
	for _, c := range commands() {
		if want := "//\t" + strings.TrimSpace("lockstep "+c.name+" "+c.synopsis) + "\n"; !strings.Contains(string(doc), want) {
			t.Errorf("doc.go does not show %q", want)
		}
		if !strings.Contains(help.String(), "  "+c.name+" ") {
			t.Errorf("lockstep help does not list %s", c.name)
		}
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		c.setup(fs)
		fs.VisitAll(func(f *flag.Flag) {
			if !strings.Contains(c.synopsis, "--"+f.Name) {
				t.Errorf("the synopsis of %s does not mention --%s", c.name, f.Name)
			}
		})
	}
	for code := exitOK; code <= exitRefused; code++ {
		i := strings.Index(usageText, fmt.Sprintf("\n  %d  ", code))
		if i < 0 {
			t.Fatalf("lockstep help does not document exit code %d", code)
		}
		line := usageText[i+3 : i+strings.Index(usageText[i+1:], "\n")+1]
		if !strings.Contains(string(doc), "//\t"+line+"\n") {
			t.Errorf("doc.go does not document exit code %d as %q", code, line)
		}
	}
}

// A checkpoint that records no durability mode (written before lockstep
// recorded it) shows as unknown; each mode has a line saying what it
// promised.
func TestDurabilityShown(t *testing.T) {
	for _, tc := range []struct {
		meta       checkpoint.Metadata
		mode, line string
	}{
		{checkpoint.Metadata{}, "unknown", "unknown (the checkpoint does not record it: written before lockstep did)"},
		{checkpoint.Metadata{Durability: "sync"}, "sync", "sync (each step's checkpoint committed before the next step ran)"},
		{checkpoint.Metadata{Durability: "async"}, "async", "async (each step's checkpoint written while the next step ran; the run returned after all were durable)"},
		{checkpoint.Metadata{Durability: "exit"}, "exit", "exit (only the checkpoints the run ended or paused on were written)"},
	} {
		mode := durabilityOf(tc.meta)
		if mode != tc.mode {
			t.Errorf("durabilityOf(%+v) = %q, want %q", tc.meta, mode, tc.mode)
		}
		if got := durabilityLine(mode); got != tc.line {
			t.Errorf("durabilityLine(%q) = %q, want %q", mode, got, tc.line)
		}
	}
}
